package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/charts"
	"github.com/shipstream/bloodraven/e2e/e2etest"
	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/internal/testenv"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
)

func freeAddr(t *testing.T) string { return testenv.FreeAddr(t) }

func freePort(t *testing.T) int { return testenv.FreePort(t) }

func upPlayground(t *testing.T) (*devenv.Playground, devenv.Config) { return e2etest.Playground(t) }

func waitFor(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	e2etest.WaitFor(t, timeout, cond)
}

func buildOperator(t *testing.T, root string) string { return e2etest.BuildOperator(t, root) }

// The playground is what `make dev` runs: this test brings it up on free
// ports and checks what the README promises a user.
func TestPlaygroundComesUpAsDocumented(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	root := testenv.RepoRoot()
	ctx := context.Background()
	cfg := devenv.Config{
		Root:           root,
		StateDir:       t.TempDir(),
		OperatorBinary: buildOperator(t, root),
		TLSAddr:        freeAddr(t),
		AuxAddr:        freeAddr(t),
		MetricsAddr:    freeAddr(t),
		ProbeAddr:      freeAddr(t),
		MySQLPorts:     [2]int{freePort(t), freePort(t)},
	}
	start := time.Now()
	p, err := devenv.Up(ctx, cfg)
	if err != nil {
		t.Fatalf("playground up: %v", err)
	}
	t.Logf("playground up in %v", time.Since(start).Round(time.Millisecond))
	down := func() {
		if p != nil {
			if err := p.Down(); err != nil {
				t.Errorf("down: %v", err)
			}
			p = nil
		}
	}
	defer down()

	t.Run("kubectl with the printed kubeconfig lists the playground group", func(t *testing.T) {
		out, err := exec.Command(filepath.Join(root, "bin", "kubectl"), "--kubeconfig", p.Paths.Kubeconfig,
			"get", "mysqlfailovergroups", "-A").CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "playground") {
			t.Fatalf("kubectl output lacks playground:\n%s", out)
		}
		t.Logf("kubectl get mysqlfailovergroups -A:\n%s", out)
	})

	t.Run("the controller bootstraps the MariaDB sites to generation 1", func(t *testing.T) {
		admin, err := client.New(p.AdminConfig, client.Options{Scheme: bloodravenscheme.New()})
		if err != nil {
			t.Fatal(err)
		}
		g := &bloodravenv1alpha1.MysqlFailoverGroup{}
		waitFor(t, 30*time.Second, func() bool {
			_ = admin.Get(ctx, client.ObjectKey{Namespace: devenv.PlaygroundNamespace, Name: devenv.GroupName}, g)
			return g.Status.TopologyGeneration == 1 && g.Status.ActiveSite == "iad" && g.Status.Health.Ready
		})
	})

	t.Run("the plain port answers 404 under /deploy/", func(t *testing.T) {
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
			req, _ := http.NewRequest(m, "http://"+cfg.AuxAddr+"/deploy/v1/groups/playground", strings.NewReader("{}"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), `"not_found"`) {
				t.Fatalf("%s: status %d body %s", m, resp.StatusCode, b)
			}
		}
	})

	t.Run("the TLS listener's certificate verifies with ca.crt for localhost and 127.0.0.1", func(t *testing.T) {
		pem, err := os.ReadFile(p.Paths.CACert)
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			t.Fatal("ca.crt holds no certificate")
		}
		_, port, _ := net.SplitHostPort(cfg.TLSAddr)
		for _, name := range []string{"localhost", "127.0.0.1"} {
			conn, err := tls.Dial("tcp", "127.0.0.1:"+port, &tls.Config{RootCAs: roots, ServerName: name})
			if err != nil {
				t.Fatalf("TLS as %s: %v", name, err)
			}
			conn.Close()
		}
	})

	t.Run("deploy.token is the deploy ServiceAccount's token for the deploy audience", func(t *testing.T) {
		token, err := os.ReadFile(p.Paths.DeployToken)
		if err != nil {
			t.Fatal(err)
		}
		kube := kubernetes.NewForConfigOrDie(p.AdminConfig)
		rev, err := kube.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
			Spec: authenticationv1.TokenReviewSpec{Token: string(token), Audiences: []string{devenv.DeployAudience}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := "system:serviceaccount:" + devenv.PlaygroundNamespace + ":" + devenv.DeployServiceAccount
		if !rev.Status.Authenticated || rev.Status.User.Username != want {
			t.Fatalf("review = %+v, want authenticated as %s", rev.Status, want)
		}
	})

	t.Run("the README's bloodraven-deploy commands work with only the flags it shows", func(t *testing.T) {
		// The commands are read from the README and pointed at this
		// playground's state directory, port and binary.
		_, port, _ := net.SplitHostPort(cfg.TLSAddr)
		cmds := readmeDeployCommands(t, root)
		if len(cmds) != 2 {
			t.Fatalf("README shows %d bloodraven-deploy commands, want run and status: %q", len(cmds), cmds)
		}
		cli := e2etest.BuildCLI(t, root)
		for _, c := range cmds {
			c = strings.NewReplacer("bin/bloodraven-deploy", cli, ".dev/", cfg.StateDir+"/",
				"https://localhost:8443", "https://localhost:"+port).Replace(c)
			cmd := exec.Command("sh", "-c", c)
			cmd.Dir = root
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", c, err, stdout.String(), stderr.String())
			}
			t.Logf("$ %s\n%s%s", c, stdout.String(), stderr.String())
			switch {
			case strings.Contains(c, " run "):
				if !strings.Contains(stdout.String(), "migrating under generation 1") ||
					!strings.Contains(stderr.String(), "the failover-hold and the migration mutex are released") {
					t.Fatal("the run did not hold the leases around the command and release them")
				}
			case strings.Contains(c, " status "):
				if !strings.Contains(stdout.String(), "playground") || !strings.Contains(stdout.String(), "no live leases") {
					t.Fatal("status does not show the group without leases")
				}
			}
		}
	})

	t.Run("bloodraven --version prints the release", func(t *testing.T) {
		out, err := exec.Command(cfg.OperatorBinary, "--version").CombinedOutput()
		release, _ := os.ReadFile(filepath.Join(root, "VERSION"))
		if err != nil || !strings.HasPrefix(string(out), strings.TrimSpace(string(release))) || len(release) < 5 {
			t.Fatalf("--version: %q, %v; VERSION is %q", out, err, release)
		}
	})

	t.Run("the operator runs as its own ServiceAccount, not as cluster-admin", func(t *testing.T) {
		rc, err := clientcmd.BuildConfigFromFlags("", p.Paths.OperatorKubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		kube := kubernetes.NewForConfigOrDie(rc)
		who, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := who.Status.UserInfo.Username; got != devenv.OperatorIdentity() {
			t.Fatalf("operator identity = %q, want %q", got, devenv.OperatorIdentity())
		}
		review, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed {
			t.Fatal("the operator may list secrets: it runs with more than its RBAC")
		}
		var status struct {
			Leader bool `json:"leader"`
		}
		resp, err := http.Get("http://" + cfg.AuxAddr + "/status")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&status); err != nil || !status.Leader {
			t.Fatalf("status page: leader=%v err=%v", status.Leader, err)
		}
	})

	t.Run("the webhooks guard the fence against the administrator", func(t *testing.T) {
		out, err := exec.Command(filepath.Join(root, "bin", "kubectl"), "--kubeconfig", p.Paths.Kubeconfig,
			"-n", devenv.PlaygroundNamespace, "patch", "mysqlfailovergroup", devenv.GroupName, "--subresource=status",
			"--type=merge", "-p", `{"status":{"topologyGeneration":7,"activeSite":"pdx"}}`).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "lying to the fence") {
			t.Fatalf("kubectl patch of the fence: err=%v\n%s", err, out)
		}
		t.Logf("kubectl patch --subresource=status as cluster-admin:\n%s", out)
	})

	t.Run("a second playground on the same state directory refuses to start", func(t *testing.T) {
		second := cfg
		second.TLSAddr, second.AuxAddr, second.MetricsAddr, second.ProbeAddr = freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
		_, err := devenv.Up(ctx, second)
		if !errors.Is(err, devenv.ErrAlreadyRunning) {
			t.Fatalf("second Up: %v, want ErrAlreadyRunning", err)
		}
		// The first one is untouched.
		if _, err := os.Stat(p.Paths.Kubeconfig); err != nil {
			t.Fatalf("first playground's kubeconfig gone: %v", err)
		}
	})

	t.Run("every answer under /deploy/ on the TLS port is JSON, never a redirect", func(t *testing.T) {
		c := deployClient(t, p)
		hc := *c.hc
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		for _, path := range []string{"/deploy", "/deploy/v1", "/deploy/v1/", "/deploy/v1//groups/" + devenv.GroupName,
			"/deploy/v1/groups/./" + devenv.GroupName, "/deploy/v1/x/../groups/" + devenv.GroupName, "/deploy//v1"} {
			for _, token := range []string{"", c.token} {
				req, err := http.NewRequest(http.MethodGet, "https://"+cfg.TLSAddr+path, nil)
				if err != nil {
					t.Fatal(err)
				}
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				resp, err := hc.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				var body map[string]any
				err = json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				want := http.StatusNotFound
				if token == "" {
					want = http.StatusUnauthorized
				}
				if resp.StatusCode != want || resp.Header.Get("Content-Type") != "application/json" || err != nil || body["error"] == nil {
					t.Errorf("GET %s (token %v): %d %q %v", path, token != "", resp.StatusCode, resp.Header.Get("Content-Type"), body)
				}
			}
		}
	})

	t.Run("every metric the chart's alerts and dashboard use is exported", func(t *testing.T) {
		names, err := charts.MonitoringMetricNames(root, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		// A deferral makes the deferral-age series appear: a hold, then a
		// planned failover behind it.
		c := deployClient(t, p)
		api := groupAPI(cfg.TLSAddr)
		tokens := c.grantMutexAndHold(api, "op-metrics", 60)
		admin, err := client.New(p.AdminConfig, client.Options{Scheme: bloodravenscheme.New()})
		if err != nil {
			t.Fatal(err)
		}
		g := &bloodravenv1alpha1.MysqlFailoverGroup{}
		key := client.ObjectKey{Namespace: devenv.PlaygroundNamespace, Name: devenv.GroupName}
		if err := admin.Get(ctx, key, g); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(g.DeepCopy())
		g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: "metrics-1", TargetSite: "pdx"}
		if err := admin.Patch(ctx, g, patch); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, func() bool {
			_ = admin.Get(ctx, key, g)
			return g.Status.PlannedFailover != nil && g.Status.PlannedFailover.Phase == bloodravenv1alpha1.PlannedFailoverPhaseDeferred
		})
		exported := scrape(t, "http://"+cfg.MetricsAddr+"/metrics")
		for _, n := range names {
			if !exported[n] {
				t.Errorf("the alerts or the dashboard use %s; the operator does not export it", n)
			}
		}
		t.Logf("%d metric names in the alerts and dashboard, all exported: %v", len(names), names)
		// Release the hold: the failover then proceeds on its own.
		for i, kind := range []string{"failover-hold", "migration"} {
			if st, _ := c.call(http.MethodDelete, api+"/leases/"+kind+"/op-metrics", nil, "X-Lease-Token", tokens[1-i]); st != http.StatusNoContent {
				t.Fatalf("release %s: %d", kind, st)
			}
		}
	})

	// What `helm test` runs (templates/tests): with an identity that is not
	// the operator's, every check passes; with the operator's own, the
	// status-guard check must fail, since the operator may write status.
	t.Run("check-install passes as another identity and catches the operator's", func(t *testing.T) {
		run := func(kubeconfig string) (string, error) {
			cmd := exec.Command(cfg.OperatorBinary, "check-install", "--kubeconfig", kubeconfig,
				"--status-url", "http://"+cfg.AuxAddr+"/status", "--namespace", devenv.PlaygroundNamespace)
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		out, err := run(p.Paths.Kubeconfig)
		if err != nil || strings.Count(out, "ok   ") != 3 || !strings.Contains(out, "ok   status-guard: a status patch of "+devenv.PlaygroundNamespace+"/"+devenv.GroupName) {
			t.Fatalf("as the admin: %v\n%s", err, out)
		}
		t.Logf("as the admin:\n%s", out)
		out, err = run(p.Paths.OperatorKubeconfig)
		if err == nil || !strings.Contains(out, "FAIL status-guard: a dry-run status patch of") || !strings.Contains(out, "ok   status:") {
			t.Fatalf("as the operator: the status-guard check passed (err %v)\n%s", err, out)
		}
		t.Logf("as the operator:\n%s", out)
	})

	t.Run("the README quickstart runs against the playground up to where a cluster is needed", func(t *testing.T) {
		runQuickstart(t, root, p)
	})

	down()
	t.Run("down stops every listener it started", func(t *testing.T) {
		for _, a := range []string{cfg.TLSAddr, cfg.AuxAddr, cfg.MetricsAddr, cfg.ProbeAddr} {
			ln, err := net.Listen("tcp", a)
			if err != nil {
				t.Fatalf("%s still in use after Down: %v", a, err)
			}
			ln.Close()
		}
		if _, err := exec.Command(filepath.Join(root, "bin", "kubectl"), "--kubeconfig", filepath.Join(cfg.StateDir, "kubeconfig"),
			"--request-timeout=2s", "get", "ns").CombinedOutput(); err == nil {
			t.Fatal("API server still answers after Down")
		}
	})
}

// readmeDeployCommands returns the README's `bin/bloodraven deploy`
// command lines, continuation lines joined.
func readmeDeployCommands(t *testing.T, root string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "bin/bloodraven-deploy ") || strings.Contains(lines[i], " completion ") {
			continue
		}
		c := lines[i]
		for strings.HasSuffix(c, "\\") && i+1 < len(lines) {
			i++
			c = strings.TrimSuffix(c, "\\") + " " + strings.TrimSpace(lines[i])
		}
		out = append(out, c)
	}
	return out
}

// scrape reads a Prometheus text exposition and returns the names it
// exports: each family, and a histogram's or summary's _bucket, _sum and
// _count series.
func scrape(t *testing.T, url string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, line := range e2etest.Samples(t, url) {
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		names[name] = true
	}
	return names
}
