package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/kubectlplugin"
)

// exitCode is a command's exit code: 0 without an error, -1 when it did not
// exit (it could not start).
func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}

// pluginNorms: what a kubectl user reaches for, through kubectl against the
// playground, while a pipeline holds the mutex and a hold: -o json|yaml
// (held against the API), -A, kubectl's own flags (--as), --version,
// completion through kubectl and the shim, --dry-run=server that changes
// nothing, and the documented exit codes.
func pluginNorms(t *testing.T, kubectl func(...string) (string, error), admin client.Client, key client.ObjectKey, noSecrets func(*testing.T, string)) {
	ctx := context.Background()
	ns := []string{"-n", devenv.PlaygroundNamespace}
	var g bloodravenv1alpha1.MysqlFailoverGroup
	if err := admin.Get(ctx, key, &g); err != nil {
		t.Fatal(err)
	}

	t.Run("-o json and -o yaml answer what the API says", func(t *testing.T) {
		for _, format := range []string{"json", "yaml"} {
			out, err := kubectl(append([]string{"status", devenv.GroupName, "-o", format}, ns...)...)
			if err != nil {
				t.Fatalf("-o %s: %v\n%s", format, err, out)
			}
			noSecrets(t, out)
			var v kubectlplugin.StatusView
			if format == "json" {
				err = json.Unmarshal([]byte(out), &v)
			} else {
				err = yaml.Unmarshal([]byte(out), &v)
			}
			if err != nil {
				t.Fatalf("-o %s does not parse: %v\n%s", format, err, out)
			}
			if v.Name != g.Name || v.Namespace != g.Namespace || v.Primary != g.Status.ActiveSite || v.TopologyGeneration != g.Status.TopologyGeneration ||
				v.Mutex == nil || v.Mutex.OperationID != "op-oncall" || len(v.Holds) != 1 || v.Holds[0].OperationID != "op-oncall" {
				t.Fatalf("-o %s: %+v, the API says %s/%s primary %s generation %d and op-oncall holds the mutex and a hold", format, v,
					g.Namespace, g.Name, g.Status.ActiveSite, g.Status.TopologyGeneration)
			}
		}
		out, err := kubectl(append([]string{"leases", devenv.GroupName, "-o", "json"}, ns...)...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		noSecrets(t, out)
		var list kubectlplugin.ListView[kubectlplugin.LeaseView]
		if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Items) != 2 {
			t.Fatalf("leases -o json: %v, want two records:\n%s", err, out)
		}
		if out, err := kubectl(append([]string{"status", devenv.GroupName, "-o", "wide"}, ns...)...); exitCode(err) != kubectlplugin.ExitUsage {
			t.Fatalf("-o wide: exit %d, want %d (usage):\n%s", exitCode(err), kubectlplugin.ExitUsage, out)
		}
	})

	t.Run("-A lists every namespace's groups", func(t *testing.T) {
		out, err := kubectl("status", "-A")
		if err != nil || !strings.Contains(out, "Group:       "+devenv.PlaygroundNamespace+"/"+devenv.GroupName) {
			t.Fatalf("status -A (err %v):\n%s", err, out)
		}
		out, err = kubectl("leases", "-A")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if err != nil || len(lines) != 3 || !strings.HasPrefix(lines[0], "NAMESPACE") || !strings.HasPrefix(lines[1], devenv.PlaygroundNamespace+" ") {
			t.Fatalf("leases -A: want a NAMESPACE column and two records (err %v):\n%s", err, out)
		}
		if out, err := kubectl("status", devenv.GroupName, "-A"); exitCode(err) != kubectlplugin.ExitUsage {
			t.Fatalf("a GROUP with -A: exit %d, want %d:\n%s", exitCode(err), kubectlplugin.ExitUsage, out)
		}
	})

	t.Run("kubectl's flags reach the plugin: --as is refused by RBAC", func(t *testing.T) {
		out, err := kubectl(append([]string{"status", devenv.GroupName, "--as", "system:serviceaccount:nowhere:nobody", "--request-timeout", "20s"}, ns...)...)
		if exitCode(err) != kubectlplugin.ExitRefused || !strings.Contains(out, "forbidden") {
			t.Fatalf("as a user without RBAC: exit %d, want %d and forbidden:\n%s", exitCode(err), kubectlplugin.ExitRefused, out)
		}
	})

	t.Run("--version", func(t *testing.T) {
		out, err := kubectl("--version")
		if err != nil || !strings.HasPrefix(out, "kubectl-bloodraven 0.") {
			t.Fatalf("--version (err %v): %q", err, out)
		}
	})

	t.Run("kubectl completes the plugin through its shim", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"__complete", "bloodraven", ""}, "status"},
			{append([]string{"__complete", "bloodraven", "status"}, append(ns, "")...), devenv.GroupName},
			{append([]string{"__complete", "bloodraven", "failover", devenv.GroupName}, append(ns, "--to", "")...), "pdx"},
			{append([]string{"__complete", "bloodraven", "verify"}, append(ns, "")...), devenv.DatabaseName},
		} {
			out, err := kubectl(tc.args...)
			found := false
			for _, line := range strings.Split(out, "\n") { // a candidate, a tab and its description
				found = found || strings.Split(line, "\t")[0] == tc.want
			}
			if err != nil || !found {
				t.Errorf("kubectl %s (err %v): want %q among:\n%s", strings.Join(tc.args, " "), err, tc.want, out)
			}
		}
	})

	t.Run("--dry-run=server changes nothing, and what the webhooks refuse is refused", func(t *testing.T) {
		out, err := kubectl(append([]string{"failover", devenv.GroupName, "--to", "pdx", "--id", "dry-1", "--dry-run=server"}, ns...)...)
		if err != nil || !strings.Contains(out, "would request planned failover dry-1") {
			t.Fatalf("failover --dry-run=server (err %v):\n%s", err, out)
		}
		out, err = kubectl(append([]string{"failover", devenv.GroupName, "--to", "nowhere", "--dry-run=server"}, ns...)...)
		if exitCode(err) != kubectlplugin.ExitRefused || !strings.Contains(out, "spec.plannedFailover.targetSite") {
			t.Fatalf("failover to a site that is not the group's: exit %d, want %d and the webhook's field:\n%s", exitCode(err), kubectlplugin.ExitRefused, out)
		}
		out, err = kubectl(append([]string{"revoke", devenv.GroupName, "--dry-run=server"}, ns...)...)
		if err != nil || !strings.Contains(out, "would ask the operator to revoke") {
			t.Fatalf("revoke --dry-run=server (err %v):\n%s", err, out)
		}
		if out, err := kubectl(append([]string{"revoke", devenv.GroupName, "--dry-run=client"}, ns...)...); exitCode(err) != kubectlplugin.ExitUsage {
			t.Fatalf("--dry-run=client: exit %d, want %d:\n%s", exitCode(err), kubectlplugin.ExitUsage, out)
		}
		var after bloodravenv1alpha1.MysqlFailoverGroup
		if err := admin.Get(ctx, key, &after); err != nil {
			t.Fatal(err)
		}
		if _, set := after.Annotations[bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation]; set || after.Spec.PlannedFailover != nil || after.Generation != g.Generation {
			t.Fatalf("a dry run changed the group: annotation set %v, plannedFailover %+v, generation %d -> %d", set,
				after.Spec.PlannedFailover, g.Generation, after.Generation)
		}
	})

	t.Run("usage errors exit 2", func(t *testing.T) {
		for _, args := range [][]string{{"status", "a", "b"}, {"failover", devenv.GroupName}, {"status", "--no-such-flag"}} {
			if out, err := kubectl(args...); exitCode(err) != kubectlplugin.ExitUsage {
				t.Errorf("kubectl bloodraven %s: exit %d, want %d:\n%s", strings.Join(args, " "), exitCode(err), kubectlplugin.ExitUsage, out)
			}
		}
	})
}
