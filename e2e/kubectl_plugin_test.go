package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/internal/testenv"
	"github.com/shipstream/bloodraven/kubectlplugin"
	"github.com/shipstream/bloodraven/leases"
)

// kubectlBloodraven builds the plugin and returns a runner of `kubectl
// bloodraven ARGS`: kubectl finds the plugin on PATH and hands it the
// arguments after its name and the environment, so the kubeconfig comes as
// a person sets it. ARGS that start with __complete run `kubectl
// __complete ARGS`: kubectl's own completion, which runs the shim.
func kubectlBloodraven(t *testing.T, p *devenv.Playground) func(args ...string) (string, error) {
	t.Helper()
	root := testenv.RepoRoot()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "kubectl-bloodraven"), "./cmd/kubectl-bloodraven")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the plugin: %v\n%s", err, out)
	}
	// The completion shim, installed beside the plugin as the docs say.
	shim, err := os.ReadFile(filepath.Join(root, "cmd", "kubectl-bloodraven", "kubectl_complete-bloodraven"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubectl_complete-bloodraven"), shim, 0o755); err != nil {
		t.Fatal(err)
	}
	return func(args ...string) (string, error) {
		if len(args) == 0 || args[0] != "__complete" {
			args = append([]string{"bloodraven"}, args...)
		}
		cmd := exec.Command(filepath.Join(root, "bin", "kubectl"), args...)
		cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+p.Paths.Kubeconfig)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
}

// `kubectl bloodraven` as the person on call runs it: kubectl finds the
// plugin on PATH, with the playground's kubeconfig and no deploy token.
// Each answer is checked against the API.
func TestKubectlBloodravenAgainstThePlayground(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	ctx := context.Background()
	p, cfg := upPlayground(t)
	admin, key, g := bootstrapped(t, p)
	kubectl := kubectlBloodraven(t, p)

	// A pipeline holds the mutex and a hold.
	c := deployClient(t, p)
	api := groupAPI(cfg.TLSAddr)
	tokens := c.grantMutexAndHold(api, "op-oncall", 120)
	noSecrets := func(t *testing.T, out string) {
		t.Helper()
		for _, tok := range tokens {
			if strings.Contains(out, tok) || strings.Contains(out, leases.HashToken(tok)) {
				t.Fatalf("the plugin printed a token or its hash:\n%s", out)
			}
		}
	}

	t.Run("status shows the primary, the generation, the mutex and the hold", func(t *testing.T) {
		out, err := kubectl("status", devenv.GroupName, "-n", devenv.PlaygroundNamespace)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		t.Logf("kubectl bloodraven status:\n%s", out)
		for _, want := range []string{"Primary:     " + g.Status.ActiveSite, "Generation:  1",
			"Mutex:       op-oncall (instance " + devenv.DatabaseName, "Holds:       op-oncall (instance " + devenv.DatabaseName} {
			if !strings.Contains(out, want) {
				t.Errorf("status lacks %q:\n%s", want, out)
			}
		}
		noSecrets(t, out)
	})

	t.Run("leases lists the records", func(t *testing.T) {
		out, err := kubectl("leases", devenv.GroupName, "-n", devenv.PlaygroundNamespace)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		t.Logf("kubectl bloodraven leases:\n%s", out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 || !strings.HasPrefix(lines[0], "KIND") {
			t.Fatalf("want a header and two records:\n%s", out)
		}
		for _, kind := range []string{"migration", "failover-hold"} {
			found := false
			for _, l := range lines[1:] {
				f := strings.Fields(l)
				found = found || (f[0] == kind && f[1] == "op-oncall" && f[2] == devenv.DatabaseName && f[3] == "active" && f[5] == "1")
			}
			if !found {
				t.Errorf("no active %s record of op-oncall at generation 1:\n%s", kind, out)
			}
		}
		noSecrets(t, out)
	})

	t.Run("it meets kubectl's norms", func(t *testing.T) { pluginNorms(t, kubectl, admin, key, noSecrets) })

	t.Run("failover shows Deferred and its retry time", func(t *testing.T) {
		out, err := kubectl("failover", devenv.GroupName, "--to", "pdx", "--id", "oncall-1", "--timeout", "8s", "-n", devenv.PlaygroundNamespace)
		if exitCode(err) != kubectlplugin.ExitTimedOut || !strings.Contains(out, "Deferred by "+bloodravenv1alpha1.DeferReasonDeploymentHold+", retry at ") {
			t.Fatalf("want Deferred by the hold and a timeout, exit %d (err %v):\n%s", kubectlplugin.ExitTimedOut, err, out)
		}
		if err := admin.Get(ctx, key, g); err != nil {
			t.Fatal(err)
		}
		pf := g.Status.PlannedFailover
		if pf == nil || pf.ID != "oncall-1" || pf.Phase != bloodravenv1alpha1.PlannedFailoverPhaseDeferred || pf.Admission == nil || pf.Admission.RetryTime == nil {
			t.Fatalf("the API shows %+v", pf)
		}
		if want := "retry at " + pf.Admission.RetryTime.UTC().Format(time.RFC3339); !strings.Contains(out, want) {
			t.Fatalf("the plugin's retry time is not the API's (%s):\n%s", want, out)
		}
	})

	t.Run("revoke waits until the operator revoked, and the failover then proceeds", func(t *testing.T) {
		out, err := kubectl("revoke", devenv.GroupName, "--reason", "INC-1", "-n", devenv.PlaygroundNamespace)
		if err != nil || !strings.Contains(out, "done: revoked op-oncall (operator_revoked)") {
			t.Fatalf("%v\n%s", err, out)
		}
		if err := admin.Get(ctx, key, g); err != nil {
			t.Fatal(err)
		}
		if _, pending := g.Annotations[bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation]; pending {
			t.Fatal("revoke returned while the annotation stands")
		}
		st, body := c.call(http.MethodPut, api+"/leases/migration/op-oncall", map[string]any{"token": tokens[0]})
		if st != http.StatusConflict || body["error"] != "revoked" {
			t.Fatalf("the revoked mutex renews: %d %v", st, body)
		}
		waitFor(t, 60*time.Second, func() bool {
			_ = admin.Get(ctx, key, g)
			return g.Status.TopologyGeneration == 2 && g.Status.ActiveSite == "pdx"
		})
		out, err = kubectl("status", devenv.GroupName, "-n", devenv.PlaygroundNamespace)
		if err != nil || !strings.Contains(out, "Primary:     pdx") || !strings.Contains(out, "Generation:  2") || !strings.Contains(out, "Mutex:       none") {
			t.Fatalf("after the move (err %v):\n%s", err, out)
		}
		out, err = kubectl("leases", devenv.GroupName, "-n", devenv.PlaygroundNamespace)
		if err != nil || strings.Count(out, " revoked ") < 2 || !strings.Contains(out, leases.ReasonOperatorRevoked) {
			t.Fatalf("leases after the revocation (err %v):\n%s", err, out)
		}
		noSecrets(t, out)
	})

	t.Run("a group that does not exist is a clear error", func(t *testing.T) {
		out, err := kubectl("status", "no-such-group", "-n", devenv.PlaygroundNamespace)
		if exitCode(err) != kubectlplugin.ExitNotFound || !strings.Contains(out, "no-such-group") || !strings.Contains(out, "not found") {
			t.Fatalf("want an error naming the group, exit %d (err %v):\n%s", kubectlplugin.ExitNotFound, err, out)
		}
		t.Logf("kubectl bloodraven status no-such-group: %s", out)
	})
}
