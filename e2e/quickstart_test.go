package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shipstream/bloodraven/e2e/e2etest"
	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/internal/testenv"
)

// quickstartStep says how the test runs the README lines it matches: how
// names why it cannot run them here ("" runs them), args are appended.
type quickstartStep struct {
	match *regexp.Regexp
	how   string
	args  []string
	// rewrite, when set, adapts the line to this test's files.
	rewrite func(string) string
	used    int
}

// runQuickstart runs the README quickstart against the playground p: the
// chart and the manifests as server-side dry runs, every line a real
// cluster needs (a registry, running Pods, an issued certificate) skipped
// with its reason. A line no step matches fails the test, and so does a
// step no line uses: the README and this test change together.
func runQuickstart(t *testing.T, root string, p *devenv.Playground) {
	ctx := context.Background()
	admin, err := client.New(p.AdminConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	crds, err := testenv.ThirdPartyCRDs()
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.InstallCRDFiles(ctx, admin, crds...); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	caFile := filepath.Join(work, "ca.crt")
	if err := os.WriteFile(caFile, mustRead(t, p.Paths.CACert), 0o600); err != nil {
		t.Fatal(err)
	}
	dryRun := []string{"--dry-run=server"}
	// The file the skipped `get secret … > ca.crt` line would have written.
	withCA := func(line string) string { return line + "=" + caFile }
	steps := []*quickstartStep{
		{match: regexp.MustCompile(`^make image$`)},
		{match: regexp.MustCompile(`^crane push `), how: "needs a registry"},
		// The playground's operator has cluster-scoped objects of the same
		// names (ClusterRole bloodraven, the lease guard): a dry run may
		// "take" them, changing nothing.
		{match: regexp.MustCompile(`^helm install bloodraven charts/bloodraven --namespace bloodraven --create-namespace `), args: []string{"--dry-run=server", "--take-ownership"}},
		{match: regexp.MustCompile(`^kubectl .*rollout status `), how: "needs running Pods (the playground has no kubelet)"},
		{match: regexp.MustCompile(`^helm test `), how: "needs the installed release's Pods"},
		{match: regexp.MustCompile(`^kubectl (create|label) namespace orders`)},
		{match: regexp.MustCompile(`^kubectl --namespace orders create secret generic orders-mysql-ca --from-file=ca\.crt=mysql-ca\.crt$`), args: dryRun,
			rewrite: func(line string) string { return strings.Replace(line, "=mysql-ca.crt", "="+caFile, 1) }},
		{match: regexp.MustCompile(`^kubectl (--namespace \S+ )?apply -f `), args: dryRun},
		{match: regexp.MustCompile(`^kubectl --namespace orders get mysqlfailovergroup orders$`), how: "the group was applied as a dry run"},
		{match: regexp.MustCompile(`^kubectl --namespace bloodraven get secret bloodraven-ca `), how: "needs cert-manager to issue the CA (the playground's ca.crt stands in)"},
		{match: regexp.MustCompile(`^kubectl --namespace orders create configmap bloodraven-ca --from-file=ca.crt$`), args: dryRun, rewrite: withCA},
		{match: regexp.MustCompile(`^kubectl .*wait --for=condition=complete job/`), how: "needs the Job's Pod to run"},
		{match: regexp.MustCompile(`^kubectl .*logs job/`), how: "needs the Job's Pod to run"},
	}
	// --create-namespace is not carried out by a dry run.
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bloodraven"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	helmHome := t.TempDir()
	env := append(os.Environ(), "PATH="+filepath.Join(root, "bin")+":"+os.Getenv("PATH"), "KUBECONFIG="+p.Paths.Kubeconfig,
		"HELM_CACHE_HOME="+helmHome, "HELM_CONFIG_HOME="+helmHome, "HELM_DATA_HOME="+helmHome)
	ran, skipped := 0, 0
	for _, line := range e2etest.QuickstartCommands(t, root) {
		var step *quickstartStep
		for _, s := range steps {
			if s.match.MatchString(line) {
				if step != nil {
					t.Fatalf("README quickstart line %q matches two steps of this test", line)
				}
				step = s
			}
		}
		if step == nil {
			t.Fatalf("README quickstart line %q: this test does not know how to run it; add a step", line)
		}
		step.used++
		if step.how != "" {
			skipped++
			t.Logf("skipped (%s): %s", step.how, line)
			continue
		}
		cmdline := line
		if step.rewrite != nil {
			cmdline = step.rewrite(cmdline)
		}
		for _, a := range step.args {
			cmdline += " " + a
		}
		cmd := exec.Command("bash", "-o", "pipefail", "-c", cmdline)
		cmd.Dir, cmd.Env = root, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("$ %s: %v\nstdout:\n%s\nstderr:\n%s", cmdline, err, stdout.String(), stderr.String())
		}
		ran++
		t.Logf("$ %s\n%s", cmdline, tail(stdout.String()+stderr.String(), 20))
		if strings.HasPrefix(line, "helm install ") {
			checkHelmDryRun(t, admin, stdout.String())
		}
	}
	for _, s := range steps {
		if s.used == 0 {
			t.Errorf("this test's step %q matches no README quickstart line: the README changed", s.match)
		}
	}
	t.Logf("README quickstart: %d lines run against the playground, %d skipped with their reason", ran, skipped)
}

// checkHelmDryRun checks helm install --dry-run=server's output: the NOTES
// were rendered (they look the Secret and the webhook configuration up on
// the server), and every manifest of the release is accepted by the
// playground's API server in dry-run mode.
func checkHelmDryRun(t *testing.T, admin client.Client, out string) {
	t.Helper()
	_, manifest, ok := strings.Cut(out, "MANIFEST:")
	manifest, notes, ok2 := strings.Cut(manifest, "NOTES:")
	if !ok || !ok2 {
		t.Fatalf("helm install --dry-run printed no MANIFEST and NOTES:\n%s", out)
	}
	for _, want := range []string{"cert-manager writes the TLS Secret bloodraven-auxiliary-tls",
		"The deployment API: https://bloodraven.bloodraven.svc.cluster.local:8443/deploy/v1", "helm test bloodraven -n bloodraven"} {
		if !strings.Contains(notes, want) {
			t.Errorf("the NOTES lack %q:\n%s", want, notes)
		}
	}
	kinds := map[string]int{}
	for _, u := range e2etest.Objects(t, strings.NewReader(manifest)) {
		kinds[u.GetKind()]++
		if u.GetNamespace() == "" && isNamespaced(u.GetKind()) {
			u.SetNamespace("bloodraven")
		}
		if err := dryRunCreateOrReplace(admin, u); err != nil {
			t.Errorf("%s %s/%s rejected: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
		}
	}
	for _, k := range []string{"Deployment", "Certificate", "Issuer", "ValidatingWebhookConfiguration", "NetworkPolicy", "PodDisruptionBudget"} {
		if kinds[k] == 0 {
			t.Errorf("the quickstart's release renders no %s: %v", k, kinds)
		}
	}
	t.Logf("helm install --dry-run=server: %d kinds accepted by the API server: %v", len(kinds), kinds)
}

// dryRunCreateOrReplace validates u as the API server would store it: a
// dry-run create, or, where the playground has an object of that name
// (its operator's ClusterRole, webhooks, lease and fence guards), a dry-run
// replace of it, so that nothing of the playground's is merged in.
func dryRunCreateOrReplace(c client.Client, u *unstructured.Unstructured) error {
	ctx := context.Background()
	err := c.Create(ctx, u.DeepCopy(), client.DryRunAll)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(u.GroupVersionKind())
	if err := c.Get(ctx, client.ObjectKeyFromObject(u), cur); err != nil {
		return err
	}
	replace := u.DeepCopy()
	replace.SetResourceVersion(cur.GetResourceVersion())
	return c.Update(ctx, replace, client.DryRunAll)
}

func isNamespaced(kind string) bool {
	switch kind {
	case "ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration", "CustomResourceDefinition",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "FlowSchema", "PriorityLevelConfiguration", "Namespace":
		return false
	}
	return true
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"…"}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
