// Package charts tests the Helm chart: lint, golden renders, the
// NetworkPolicy's shape, refusals of misconfiguration, and a server-side
// dry-run of every rendered manifest against the real test kube-apiserver.
package charts

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/shipstream/bloodraven/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := filepath.Join(testenv.RepoRoot(), "bin", "helm")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s missing: run `make tools`", bin)
	}
	var out, errb bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	err := cmd.Run()
	if err != nil {
		return out.String() + errb.String(), fmt.Errorf("helm %v: %w: %s", args, err, errb.String())
	}
	return out.String(), nil
}

func chartDir() string { return filepath.Join(testenv.RepoRoot(), "charts", "bloodraven") }

// render runs helm template with --set values, release bloodraven in
// namespace bloodraven.
func render(t *testing.T, sets ...string) (string, error) {
	return renderRelease(t, "bloodraven", "bloodraven", sets...)
}

// renderRelease is render for another release name and namespace.
func renderRelease(t *testing.T, release, namespace string, sets ...string) (string, error) {
	args := []string{"template", release, chartDir(), "--namespace", namespace, "--include-crds"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return helm(t, args...)
}

// apiServer admits the API server's (example) address to the webhooks.
const apiServer = "auxiliary.deployAPI.networkPolicy.apiServerSources[0].ipBlock.cidr=10.0.0.10/32"

var cases = map[string][]string{
	"default":                     nil,
	"deploy-api":                  {"auxiliary.deployAPI.enabled=true", apiServer},
	"deploy-api-without-webhooks": {"auxiliary.deployAPI.enabled=true", "webhooks.enabled=false"},
	"monitoring":                  {"monitoring.prometheusRule.enabled=true", "monitoring.dashboard.enabled=true", "monitoring.prometheusRule.labels.release=kube-prometheus-stack"},
	"additional-ingress": {"auxiliary.deployAPI.enabled=true", apiServer,
		"auxiliary.deployAPI.networkPolicy.additionalIngress[0].from[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=database-system",
		"auxiliary.deployAPI.networkPolicy.additionalIngress[0].from[0].podSelector.matchLabels.app\\.kubernetes\\.io/name=escrow-client",
		"auxiliary.deployAPI.networkPolicy.additionalIngress[0].ports[0].protocol=TCP",
		"auxiliary.deployAPI.networkPolicy.additionalIngress[0].ports[0].port=8443"},
	"namespaced":          {watchNamespaces},
	"production":          production,
	"single-replica":      {"replicas=1"},
	"cert-manager-issuer": {"certManager.enabled=true", "certManager.issuerRef.name=platform-ca", "certManager.issuerRef.kind=ClusterIssuer"},
}

// production sets every value a production install touches: scheduling,
// pod metadata, the operator's flags, cert-manager and monitoring.
var production = []string{"replicas=3", "priorityClassName=platform-controllers",
	"nodeSelector.kubernetes\\.io/os=linux",
	"tolerations[0].key=dedicated", "tolerations[0].operator=Equal", "tolerations[0].value=platform", "tolerations[0].effect=NoSchedule",
	"podAnnotations.example\\.com/owner=dba", "podLabels.team=databases", "imagePullSecrets[0].name=regcred",
	"image.repository=registry.example.com/bloodraven", "image.tag=0.2.0-rc1",
	"extraArgs[0]=--zap-encoder=console", "extraEnv[0].name=GOMEMLIMIT", "extraEnv[0].value=400MiB",
	"logLevel=debug", "operator.probeInterval=5s", "operator.primaryProbeInterval=500ms", "operator.groupWorkers=32",
	"operator.kubeAPIQPS=800", "operator.kubeAPIBurst=1600", "operator.controllerAPIQPS=400", "operator.controllerAPIBurst=800",
	"operator.gracefulShutdownTimeout=45s",
	"certManager.enabled=true", "metrics.secure=true",
	"monitoring.podMonitor.enabled=true", "monitoring.podMonitor.additionalLabels.release=kube-prometheus-stack",
	"monitoring.prometheusRule.enabled=true", "monitoring.prometheusRule.labels.release=kube-prometheus-stack",
}

// watchNamespaces is the namespaced mode of the cases.
const watchNamespaces = "watchNamespaces={team-b,team-a}"

func TestLint(t *testing.T) {
	for _, sets := range [][]string{nil, {"auxiliary.deployAPI.enabled=true", apiServer}, {watchNamespaces}} {
		args := []string{"lint", chartDir()}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		if out, err := helm(t, args...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
}

func TestGoldenRenders(t *testing.T) {
	for name, sets := range cases {
		t.Run(name, func(t *testing.T) {
			out, err := render(t, sets...)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".golden.yaml")
			if *update {
				if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run: go test ./charts -update)", err)
			}
			if string(want) != out {
				t.Fatalf("render differs from %s; run `go test ./charts -update` and review the diff", golden)
			}
		})
	}
}

// docs splits a render into objects.
func docs(t *testing.T, out string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}

func find(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func TestNetworkPolicyShape(t *testing.T) {
	out, err := render(t, cases["additional-ingress"]...)
	if err != nil {
		t.Fatal(err)
	}
	nps := find(docs(t, out), "NetworkPolicy")
	if len(nps) != 1 {
		t.Fatalf("%d NetworkPolicies", len(nps))
	}
	data, _ := yaml.Marshal(nps[0].Object)
	var np networkingv1.NetworkPolicy
	if err := yaml.UnmarshalStrict(data, &np); err != nil {
		t.Fatal(err)
	}
	if len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress || len(np.Spec.Egress) != 0 {
		t.Fatalf("policy types %v egress %v: want Ingress only, no egress", np.Spec.PolicyTypes, np.Spec.Egress)
	}
	if np.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] != "bloodraven" {
		t.Fatalf("pod selector %v", np.Spec.PodSelector)
	}
	if len(np.Spec.Ingress) != 4 {
		t.Fatalf("%d ingress rules, want TLS, API server, open ports, additional", len(np.Spec.Ingress))
	}
	tlsRule := np.Spec.Ingress[0]
	if len(tlsRule.Ports) != 1 || tlsRule.Ports[0].Port.IntVal != 8443 || len(tlsRule.From) != 2 {
		t.Fatalf("TLS rule %+v", tlsRule)
	}
	and := tlsRule.From[0]
	if and.PodSelector == nil || and.NamespaceSelector == nil ||
		and.PodSelector.MatchLabels["bloodraven.shipstream.io/deploy-client"] != "true" ||
		and.NamespaceSelector.MatchLabels["shipstream.io/mysql-client"] != "true" {
		t.Fatalf("the deploy-client peer must carry both selectors in one entry (AND): %+v", and)
	}
	sidecar := tlsRule.From[1]
	if sidecar.NamespaceSelector == nil || len(sidecar.NamespaceSelector.MatchLabels) != 0 ||
		sidecar.PodSelector.MatchLabels["app.kubernetes.io/name"] != "mysql" || sidecar.PodSelector.MatchLabels["app.kubernetes.io/managed-by"] != "bloodraven" {
		t.Fatalf("sidecar peer %+v", sidecar)
	}
	apiRule := np.Spec.Ingress[1]
	if len(apiRule.From) != 1 || apiRule.From[0].IPBlock == nil || apiRule.From[0].IPBlock.CIDR != "10.0.0.10/32" ||
		apiRule.From[0].PodSelector != nil || apiRule.From[0].NamespaceSelector != nil ||
		len(apiRule.Ports) != 1 || apiRule.Ports[0].Port.IntVal != 8443 {
		t.Fatalf("the API server's rule must admit exactly the configured sources on the TLS port: %+v", apiRule)
	}
	open := np.Spec.Ingress[2]
	if len(open.From) != 0 {
		t.Fatalf("ports 8080-8082 must be open to any source: %+v", open)
	}
	var ports []int32
	for _, p := range open.Ports {
		ports = append(ports, p.Port.IntVal)
	}
	if fmt.Sprint(ports) != "[8080 8081 8082]" {
		t.Fatalf("open ports %v", ports)
	}
	extra := np.Spec.Ingress[3]
	if extra.From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "database-system" || *extra.Ports[0].Port != intstr.FromInt32(8443) {
		t.Fatalf("additionalIngress not appended as written: %+v", extra)
	}
	if out, err := render(t); err != nil || len(find(docs(t, out), "NetworkPolicy")) != 0 {
		t.Fatalf("a NetworkPolicy without the deploy API (err %v)", err)
	}
}

func TestMisconfigurationFailsWithItsMessage(t *testing.T) {
	tests := map[string]struct {
		sets []string
		want string
	}{
		"deploy API without escrow TLS": {[]string{"auxiliary.deployAPI.enabled=true", "auxiliary.escrowTLS.enabled=false", "webhooks.enabled=false"},
			"auxiliary.deployAPI.enabled=true requires auxiliary.escrowTLS.enabled=true"},
		"deploy API without leader election": {[]string{"auxiliary.deployAPI.enabled=true", "leaderElection.enabled=false"},
			"requires leaderElection.enabled=true"},
		"escrow TLS without a Secret": {[]string{"auxiliary.escrowTLS.existingSecret="},
			"requires auxiliary.escrowTLS.existingSecret"},
		"policy and webhooks without the API server's sources": {[]string{"auxiliary.deployAPI.enabled=true"},
			"auxiliary.deployAPI.networkPolicy.apiServerSources is empty: the NetworkPolicy would block the Kubernetes API server's calls to the validating webhooks on port 8443"},
		"a watched namespace that is not a DNS label": {[]string{"watchNamespaces={team-a,Team_B}"},
			`watchNamespaces: "Team_B" is not a namespace name: a DNS-1123 label`},
		"a watched namespace longer than a label": {[]string{"watchNamespaces={" + strings.Repeat("a", 64) + "}"},
			`is not a namespace name: a DNS-1123 label (at most 63`},
		"a watched namespace ending in a dash": {[]string{"watchNamespaces={team-}"},
			`watchNamespaces: "team-" is not a namespace name`},
		"cert-manager without the TLS listener": {[]string{"certManager.enabled=true", "auxiliary.escrowTLS.enabled=false", "webhooks.enabled=false", "metrics.secure=false"},
			"certManager.enabled=true requires auxiliary.escrowTLS.enabled=true"},
		"cert-manager and a caBundle": {[]string{"certManager.enabled=true", "webhooks.caBundle=Zm9v"},
			"webhooks.caBundle is set and certManager.enabled=true"},
		"secure metrics without the TLS listener": {[]string{"metrics.secure=true", "auxiliary.escrowTLS.enabled=false", "webhooks.enabled=false"},
			"metrics.secure=true (the default) requires auxiliary.escrowTLS.enabled=true"},
		"the default's secure metrics without the TLS listener": {[]string{"auxiliary.escrowTLS.enabled=false", "webhooks.enabled=false"},
			"set metrics.secure=false only if no one who may not see every tenant's group names can reach port 8080"},
		"an issuer without cert-manager": {[]string{"certManager.issuerRef.name=platform-ca"},
			"certManager.issuerRef is set but certManager.enabled=false"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := render(t, tc.sets...)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Fatalf("err=%v output %q, want failure mentioning %q", err, out, tc.want)
			}
		})
	}
}

// Every rendered manifest is accepted by the real API server, in the
// cluster-wide and the namespaced mode: a server-side apply in dry-run mode,
// which validates creates (the lease guard's CEL included) and (for the CRDs
// envtest already installed) updates alike.
func TestRenderedManifestsAreAcceptedByTheAPIServer(t *testing.T) {
	ctx := context.Background()
	c := env.Client
	for _, ns := range []string{"bloodraven", "team-a", "team-b"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
	}
	common := []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service", "Deployment",
		"ValidatingWebhookConfiguration", "CustomResourceDefinition", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
		"FlowSchema", "PriorityLevelConfiguration"}
	installThirdPartyCRDs(t)
	for name, want := range map[string][]string{
		"additional-ingress": append(common, "NetworkPolicy", "PodDisruptionBudget"),
		"namespaced":         common,
		"production":         append(common, "PodDisruptionBudget", "Certificate", "Issuer", "PodMonitor", "PrometheusRule", "Secret"),
	} {
		t.Run(name, func(t *testing.T) {
			out, err := render(t, cases[name]...)
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]int{}
			for _, o := range docs(t, out) {
				kinds[o.GetKind()]++
				//lint:ignore SA1019 a server-side apply of arbitrary unstructured objects; client.Client.Apply takes typed apply configurations
				err := c.Patch(ctx, o, client.Apply, client.DryRunAll, client.FieldOwner("helm-chart-test"), client.ForceOwnership)
				if err != nil {
					t.Errorf("%s %s/%s rejected: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
			}
			for _, k := range want {
				if kinds[k] == 0 {
					t.Errorf("render has no %s", k)
				}
			}
		})
	}
}

func TestAlertsAndDashboardAreValidPromQL(t *testing.T) {
	names, err := MonitoringMetricNames(testenv.RepoRoot(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Every name is the operator's own or controller-runtime's; the e2e
	// test checks each against a live /metrics.
	for _, n := range names {
		if !strings.HasPrefix(n, "bloodraven_") && !strings.HasPrefix(n, "controller_runtime_") && !strings.HasPrefix(n, "leader_election_") {
			t.Errorf("the rules use %s, which the operator does not export", n)
		}
	}
	if len(names) < 10 {
		t.Fatalf("only %d metrics in the rules and dashboard: %v", len(names), names)
	}
	// Each is documented.
	doc, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		base := strings.TrimSuffix(n, "_bucket")
		if !strings.Contains(string(doc), "`"+base+"`") {
			t.Errorf("docs/metrics.md does not document %s", base)
		}
	}
}

// Every alert fires when its case says and stays quiet otherwise, at the
// chart's default thresholds (charts/testdata/alert-cases.yaml, evaluated
// with Prometheus's engine as `promtool test rules` does).
func TestEveryAlertFiresWhenItsCaseSays(t *testing.T) {
	dir := t.TempDir()
	if _, err := MonitoringMetricNames(testenv.RepoRoot(), dir); err != nil {
		t.Fatal(err)
	}
	if err := CheckAlertCases(testenv.RepoRoot(), filepath.Join(dir, "rules.yaml"), filepath.Join(testenv.RepoRoot(), AlertCasesFile)); err != nil {
		t.Fatal(err)
	}
}

// The case check is not vacuous: a case that expects an alert too early, one
// that expects quiet where it fires, and an alert without a case all fail.
func TestAWrongAlertCaseIsCaught(t *testing.T) {
	dir := t.TempDir()
	if _, err := MonitoringMetricNames(testenv.RepoRoot(), dir); err != nil {
		t.Fatal(err)
	}
	wrong := `interval: 1m
cases:
  - alert: BloodravenLeaseGuardMissing
    series: ['bloodraven_lease_guard_policy_present 1 1 0x10']
    quiet: [7m]
    firing: [6m]
`
	path := filepath.Join(dir, "wrong.yaml")
	if err := os.WriteFile(path, []byte(wrong), 0o644); err != nil {
		t.Fatal(err)
	}
	err := CheckAlertCases(testenv.RepoRoot(), filepath.Join(dir, "rules.yaml"), path)
	if err == nil {
		t.Fatal("wrong cases passed")
	}
	for _, want := range []string{"BloodravenLeaseGuardMissing: not firing at 6m", "BloodravenLeaseGuardMissing: firing at 7m, want quiet",
		"alert BloodravenNoLeader (severity critical) has no case"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the check did not report %q:\n%v", want, err)
		}
	}
}

// Every dashboard query of a metric labelled by namespace or group filters
// by the $namespace and $group variables (labels as docs/metrics.md gives
// them), so that choosing a group shows that group.
func TestTheDashboardHonoursNamespaceAndGroup(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `(bloodraven_[a-z_]+)` \\| [a-z]+ \\| ([^|]*) \\|")
	labelled := map[string]string{} // metric -> its labels cell
	for _, l := range strings.Split(string(doc), "\n") {
		if m := row.FindStringSubmatch(l); m != nil {
			labelled[m[1]] = m[2]
		}
	}
	b, err := os.ReadFile(filepath.Join(chartDir(), "files", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	selector := regexp.MustCompile(`(bloodraven_[a-z_]+?)(_bucket)?(\{[^}]*\})?(?:[\[) ]|$)`)
	checked := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, m := range selector.FindAllStringSubmatch(tg.Expr, -1) {
				labels, ok := labelled[m[1]]
				if !ok {
					t.Errorf("panel %q: %s has no row in docs/metrics.md", p.Title, m[1])
					continue
				}
				checked++
				if strings.Contains(labels, "`namespace`") && !strings.Contains(m[3], `namespace=~"$namespace"`) {
					t.Errorf("panel %q: %s is not filtered by $namespace: %s", p.Title, m[1], tg.Expr)
				}
				if strings.Contains(labels, "`group`") && !strings.Contains(m[3], `group=~"$group"`) {
					t.Errorf("panel %q: %s is not filtered by $group: %s", p.Title, m[1], tg.Expr)
				}
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d bloodraven selectors checked", checked)
	}
}

func TestTheChartFollowsTheRelease(t *testing.T) {
	release, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(chartDir(), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	want := strings.TrimSpace(string(release))
	if chart.Version != want || chart.AppVersion != want {
		t.Fatalf("Chart.yaml version %q, appVersion %q; VERSION says %q", chart.Version, chart.AppVersion, want)
	}
}

// The spec's address reaches only the leader: the Service named by
// auxiliary.service.name selects the leader label the operator keeps on its
// own Pod; the webhooks go through a second Service over every replica; the
// operator may patch Pods of its own namespace only, to set the label.
func TestTheSpecsAddressReachesOnlyTheLeader(t *testing.T) {
	out, err := render(t, cases["deploy-api"]...)
	if err != nil {
		t.Fatal(err)
	}
	objs := docs(t, out)
	selectors := map[string]map[string]any{}
	for _, s := range find(objs, "Service") {
		sel, _, _ := unstructured.NestedMap(s.Object, "spec", "selector")
		selectors[s.GetName()] = sel
	}
	if selectors["bloodraven"]["bloodraven.shipstream.io/leader"] != "true" {
		t.Fatalf("Service bloodraven selects %v: want the leader label", selectors["bloodraven"])
	}
	if wh, ok := selectors["bloodraven-webhooks"]; !ok || wh["bloodraven.shipstream.io/leader"] != nil {
		t.Fatalf("the webhooks' Service selects %v (present %v): want every replica", wh, ok)
	}
	for _, w := range find(objs, "ValidatingWebhookConfiguration") {
		hooks, _, _ := unstructured.NestedSlice(w.Object, "webhooks")
		for _, h := range hooks {
			name, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "service", "name")
			if name != "bloodraven-webhooks" {
				t.Fatalf("webhook %v goes through Service %q, want bloodraven-webhooks", h.(map[string]any)["name"], name)
			}
		}
	}
	var roles int
	for _, r := range find(objs, "Role") {
		rules, _, _ := unstructured.NestedSlice(r.Object, "rules")
		for _, rule := range rules {
			res, _, _ := unstructured.NestedStringSlice(rule.(map[string]any), "resources")
			verbs, _, _ := unstructured.NestedStringSlice(rule.(map[string]any), "verbs")
			if strings.Join(res, ",") == "pods" && strings.Join(verbs, ",") == "get,patch" && r.GetNamespace() == "bloodraven" {
				roles++
			}
		}
	}
	if roles != 1 {
		t.Fatal("no Role lets the operator get and patch the Pods of its own namespace")
	}
	if !strings.Contains(out, "name: POD_NAME") {
		t.Fatal("the Deployment does not give the operator its Pod's name")
	}
}
