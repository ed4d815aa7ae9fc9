package e2e

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shipstream/bloodraven/e2e/e2etest"
	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/internal/testenv"
)

// The chart's namespaced install (watchNamespaces), for real: the operator
// binary runs with exactly the RBAC the chart renders for
// watchNamespaces={playground} (Roles in the watched and the release
// namespace, a ClusterRole for TokenReviews and the lease guard's get) and
// --watch-namespaces, and serves the playground scene: the group
// bootstraps on real MariaDB, the deployment API grants, renews and
// releases, and the lease guard is seen. `kubectl auth can-i` shows what it
// no longer has: no Secret, no Lease, no group outside its namespaces.
func TestTheNamespacedInstallServesThePlayground(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	rbac := chartRBAC(t, "--set", "watchNamespaces={"+devenv.PlaygroundNamespace+"}")
	p, cfg := e2etest.PlaygroundWith(t, func(c *devenv.Config) {
		c.WatchNamespaces = []string{devenv.PlaygroundNamespace}
		c.OperatorRBAC = rbac
	})

	c := deployClient(t, p)
	api := groupAPI(cfg.TLSAddr)
	if st, body := c.call(http.MethodGet, api, nil); st != http.StatusOK || body["activeSite"] != "iad" {
		t.Fatalf("observation: %d %v", st, body)
	}
	st, grant := c.call(http.MethodPost, api+"/leases", map[string]any{"kind": "migration", "operationId": "ns-1", "instance": devenv.DatabaseName})
	if st != http.StatusCreated || grant["namespace"] != devenv.PlaygroundNamespace {
		t.Fatalf("grant: %d %v", st, grant)
	}
	if st, body := c.call(http.MethodPut, api+"/leases/migration/ns-1", map[string]any{"token": grant["token"]}); st != http.StatusOK {
		t.Fatalf("renewal: %d %v", st, body)
	}
	if st, body := c.call(http.MethodDelete, api+"/leases/migration/ns-1", nil, "X-Lease-Token", grant["token"].(string)); st != http.StatusNoContent {
		t.Fatalf("release: %d %v", st, body)
	}
	if v := e2etest.MetricValue(t, "http://"+cfg.MetricsAddr+"/metrics", "bloodraven_lease_guard_policy_present"); v != 1 {
		t.Errorf("bloodraven_lease_guard_policy_present = %v: the namespaced ClusterRole does not let the operator see its guard", v)
	}

	as := "--as=" + devenv.OperatorIdentity()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"get", "secrets", "-n", "default"}, "no"},
		{[]string{"get", "secrets", "-n", "kube-system"}, "no"},
		{[]string{"list", "secrets", "--all-namespaces"}, "no"},
		{[]string{"create", "leases", "-n", "kube-node-lease"}, "no"},
		{[]string{"list", "mysqlfailovergroups.bloodraven.shipstream.io", "--all-namespaces"}, "no"},
		{[]string{"get", "secrets", "-n", devenv.PlaygroundNamespace}, "yes"},
		{[]string{"update", "leases", "-n", devenv.PlaygroundNamespace}, "yes"},
		{[]string{"create", "tokenreviews.authentication.k8s.io"}, "yes"},
	} {
		got := kubectlCanI(t, p.Paths.Kubeconfig, append(tc.args, as)...)
		if got != tc.want {
			t.Errorf("kubectl auth can-i %s: %s, want %s", strings.Join(tc.args, " "), got, tc.want)
		}
	}
}

// chartRBAC renders the chart as release bloodraven in the playground
// operator's namespace and returns its RBAC objects.
func chartRBAC(t *testing.T, sets ...string) []client.Object {
	t.Helper()
	root := testenv.RepoRoot()
	args := append([]string{"template", "bloodraven", filepath.Join(root, "charts", "bloodraven"), "--namespace", devenv.OperatorNamespace}, sets...)
	cmd := exec.Command(filepath.Join(root, "bin", "helm"), args...)
	cmd.Env = append(cmd.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	var objs []client.Object
	for _, u := range e2etest.Objects(t, bytes.NewReader(out)) {
		switch u.GetKind() {
		case "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
			objs = append(objs, u)
		}
	}
	if len(objs) == 0 {
		t.Fatal("the chart rendered no RBAC")
	}
	return objs
}

// kubectlCanI runs kubectl auth can-i and returns its answer (yes or no).
func kubectlCanI(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(context.Background(), filepath.Join(testenv.RepoRoot(), "bin", "kubectl"),
		append([]string{"--kubeconfig", kubeconfig, "auth", "can-i"}, args...)...)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("kubectl: %v", err)
	}
	return strings.TrimSpace(string(out))
}
