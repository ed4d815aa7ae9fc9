package charts

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/shipstream/bloodraven/internal/testenv"
)

// installThirdPartyCRDs installs cert-manager's and the Prometheus
// Operator's CRDs (bin/crds, copied from their Go modules by make tools), so
// that the API server validates the chart's Certificates, Issuers,
// PodMonitor and PrometheusRule like any other object.
func installThirdPartyCRDs(t *testing.T) {
	t.Helper()
	files, err := testenv.ThirdPartyCRDs()
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.InstallCRDFiles(context.Background(), env.Client, files...); err != nil {
		t.Fatal(err)
	}
}

// deployment is the rendered Deployment's pod spec, as a map.
func podSpec(t *testing.T, objs []*unstructured.Unstructured) map[string]any {
	t.Helper()
	ds := find(objs, "Deployment")
	if len(ds) != 1 {
		t.Fatalf("%d Deployments", len(ds))
	}
	spec, _, _ := unstructured.NestedMap(ds[0].Object, "spec", "template", "spec")
	return spec
}

// A node drain never takes the last leader: with more than one replica a
// PodDisruptionBudget lets one go at a time and the replicas prefer
// different nodes; a single replica gets neither, so it never blocks a
// drain; an affinity of the user's replaces the chart's.
func TestDisruptionBudgetAndSpreadFollowTheReplicas(t *testing.T) {
	tests := map[string]struct {
		sets         []string
		pdb          bool
		antiAffinity bool
		userAffinity bool
	}{
		"two replicas (the default)": {pdb: true, antiAffinity: true},
		"three replicas":             {sets: []string{"replicas=3"}, pdb: true, antiAffinity: true},
		"one replica":                {sets: []string{"replicas=1"}},
		"the budget turned off":      {sets: []string{"podDisruptionBudget.enabled=false"}, antiAffinity: true},
		"anti-affinity turned off":   {sets: []string{"podAntiAffinity.enabled=false"}, pdb: true},
		"an affinity of the user's":  {sets: []string{"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists"}, pdb: true, userAffinity: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := render(t, tc.sets...)
			if err != nil {
				t.Fatal(err)
			}
			objs := docs(t, out)
			pdbs := find(objs, "PodDisruptionBudget")
			if got := len(pdbs) == 1; got != tc.pdb {
				t.Fatalf("PodDisruptionBudget rendered: %v, want %v", got, tc.pdb)
			}
			if tc.pdb {
				mu, _, _ := unstructured.NestedFieldNoCopy(pdbs[0].Object, "spec", "maxUnavailable")
				sel, _, _ := unstructured.NestedStringMap(pdbs[0].Object, "spec", "selector", "matchLabels")
				if fmt.Sprint(mu) != "1" || sel["app.kubernetes.io/name"] != "bloodraven" || sel["app.kubernetes.io/instance"] != "bloodraven" {
					t.Fatalf("budget maxUnavailable %v selector %v", mu, sel)
				}
			}
			aff, _, _ := unstructured.NestedMap(podSpec(t, objs), "affinity")
			preferred, _, _ := unstructured.NestedSlice(aff, "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution")
			if got := len(preferred) == 1; got != tc.antiAffinity {
				t.Fatalf("soft anti-affinity: %v, want %v (affinity %v)", got, tc.antiAffinity, aff)
			}
			if tc.antiAffinity {
				key, _, _ := unstructured.NestedString(preferred[0].(map[string]any), "podAffinityTerm", "topologyKey")
				if key != "kubernetes.io/hostname" {
					t.Fatalf("topologyKey %q", key)
				}
				if _, required := aff["podAntiAffinity"].(map[string]any)["requiredDuringSchedulingIgnoredDuringExecution"]; required {
					t.Fatal("a hard anti-affinity would leave a replica pending on a one-node cluster")
				}
			}
			if _, ok := aff["nodeAffinity"]; ok != tc.userAffinity {
				t.Fatalf("the user's nodeAffinity rendered: %v, want %v", ok, tc.userAffinity)
			}
		})
	}
}

// The values schema turns a typo into a failure instead of a value the
// chart silently ignores.
func TestTheSchemaRefusesWhatTheChartDoesNotKnow(t *testing.T) {
	tests := map[string]struct {
		set  string
		want string
	}{
		"a misspelt nested key":      {"auxiliary.deployApi.enabled=true", "deployApi"},
		"a misspelt top-level key":   {"replica=3", "replica"},
		"a misspelt monitoring key":  {"monitoring.podmonitor.enabled=true", "podmonitor"},
		"an unknown topology driver": {"topologyDriver=mysqll", "topologyDriver"},
		"a duration that is not one": {"operator.probeInterval=ten", "probeInterval"},
		"no replicas":                {"replicas=0", "replicas"},
		"an unknown log level":       {"logLevel=verbose", "logLevel"},
		"an issuer of another kind":  {"certManager.issuerRef.kind=Vault", "kind"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for _, args := range [][]string{{"lint", chartDir(), "--set", tc.set}, {"template", "bloodraven", chartDir(), "--set", tc.set}} {
				out, err := helm(t, args...)
				if err == nil || !strings.Contains(out, tc.want) {
					t.Fatalf("helm %s accepted %s (err %v): %s", args[0], tc.set, err, out)
				}
			}
		})
	}
	// The values file itself, and every case of the golden renders, pass.
	for name, sets := range cases {
		args := []string{"lint", chartDir()}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		if out, err := helm(t, args...); err != nil {
			t.Errorf("case %s: %v\n%s", name, err, out)
		}
	}
}

// heading turns a Markdown heading into its GitHub anchor.
func heading(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = regexp.MustCompile("[^a-z0-9 _-]").ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// Every alert links to its entry of docs/troubleshooting.md.
func TestEveryAlertLinksToItsRunbook(t *testing.T) {
	md, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, l := range strings.Split(string(md), "\n") {
		if strings.HasPrefix(l, "#") {
			anchors[heading(strings.TrimLeft(l, "#"))] = true
		}
	}
	out, err := render(t, "monitoring.prometheusRule.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	rules := find(docs(t, out), "PrometheusRule")
	if len(rules) != 1 {
		t.Fatalf("%d PrometheusRules", len(rules))
	}
	groups, _, _ := unstructured.NestedSlice(rules[0].Object, "spec", "groups")
	base := "https://github.com/shipstream/bloodraven/blob/v" + chartAppVersion(t) + "/docs/troubleshooting.md#"
	n := 0
	for _, g := range groups {
		rs, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, r := range rs {
			alert, _, _ := unstructured.NestedString(r.(map[string]any), "alert")
			url, _, _ := unstructured.NestedString(r.(map[string]any), "annotations", "runbook_url")
			n++
			if !strings.HasPrefix(url, base) {
				t.Errorf("%s: runbook_url %q, want it under %s", alert, url, base)
				continue
			}
			anchor := strings.TrimPrefix(url, base)
			if anchor != strings.ToLower(alert) || !anchors[anchor] {
				t.Errorf("%s: runbook_url anchor %q is not a heading of docs/troubleshooting.md named after the alert", alert, anchor)
			}
		}
	}
	if n < 10 {
		t.Fatalf("%d alerts", n)
	}
	out, err = render(t, "monitoring.prometheusRule.enabled=true", "monitoring.prometheusRule.runbookBaseURL=https://wiki.example.com/bloodraven")
	if err != nil || !strings.Contains(out, "runbook_url: https://wiki.example.com/bloodraven#bloodravennoleader") {
		t.Fatalf("runbookBaseURL not used (err %v)", err)
	}
}

func chartAppVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir(), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c.AppVersion
}

// cert-manager writes the Secret the pods mount, with names for both
// Services, and its injector fills the webhooks' caBundle.
func TestCertManagerCoversBothServicesAndInjectsTheCA(t *testing.T) {
	tests := map[string]struct {
		sets       []string
		issuer     string
		issuerKind string
		ownCA      bool
	}{
		"the chart's own CA":          {sets: []string{"certManager.enabled=true"}, issuer: "bloodraven-ca", issuerKind: "Issuer", ownCA: true},
		"an issuer of the platform's": {sets: cases["cert-manager-issuer"], issuer: "platform-ca", issuerKind: "ClusterIssuer"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := render(t, tc.sets...)
			if err != nil {
				t.Fatal(err)
			}
			objs := docs(t, out)
			var serving *unstructured.Unstructured
			for _, c := range find(objs, "Certificate") {
				if c.GetName() == "bloodraven-serving" {
					serving = c
				}
			}
			if serving == nil {
				t.Fatal("no serving Certificate")
			}
			secret, _, _ := unstructured.NestedString(serving.Object, "spec", "secretName")
			names, _, _ := unstructured.NestedStringSlice(serving.Object, "spec", "dnsNames")
			issuer, _, _ := unstructured.NestedString(serving.Object, "spec", "issuerRef", "name")
			kind, _, _ := unstructured.NestedString(serving.Object, "spec", "issuerRef", "kind")
			want := []string{"bloodraven.bloodraven.svc", "bloodraven.bloodraven.svc.cluster.local", "bloodraven-webhooks.bloodraven.svc", "bloodraven-webhooks.bloodraven.svc.cluster.local"}
			if secret != "bloodraven-auxiliary-tls" || strings.Join(names, " ") != strings.Join(want, " ") || issuer != tc.issuer || kind != tc.issuerKind {
				t.Fatalf("serving certificate: secret %q names %v issuer %s %s", secret, names, kind, issuer)
			}
			if got := len(find(objs, "Issuer")) == 2; got != tc.ownCA {
				t.Fatalf("the chart's own CA (two Issuers) rendered: %v, want %v", got, tc.ownCA)
			}
			vwc := find(objs, "ValidatingWebhookConfiguration")
			if len(vwc) != 1 || vwc[0].GetAnnotations()["cert-manager.io/inject-ca-from"] != "bloodraven/bloodraven-serving" {
				t.Fatalf("webhook configuration annotations: %v", vwc[0].GetAnnotations())
			}
		})
	}
	// Without cert-manager: no Certificate, no injection annotation.
	out, err := render(t)
	if err != nil {
		t.Fatal(err)
	}
	objs := docs(t, out)
	if len(find(objs, "Certificate")) != 0 || find(objs, "ValidatingWebhookConfiguration")[0].GetAnnotations()["cert-manager.io/inject-ca-from"] != "" {
		t.Fatal("cert-manager objects rendered without certManager.enabled")
	}
}

// With metrics.secure the PodMonitor scrapes over HTTPS, verifying the
// listener's certificate under a name it carries, and sends the token of a
// scraper ServiceAccount that the API server (a real SubjectAccessReview,
// with the rendered RBAC applied) lets get /metrics; the operator is told
// --metrics-secure. With metrics.secure=false nothing of this renders.
func TestSecureMetricsAreScrapedWithTheChartsScraper(t *testing.T) {
	ctx := context.Background()
	const release = "metrics"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: release}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	out, err := renderRelease(t, release, release, "certManager.enabled=true", "metrics.secure=true", "monitoring.podMonitor.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	objs := docs(t, out)
	if args := fmt.Sprint(podSpec(t, objs)["containers"]); !strings.Contains(args, "--metrics-secure") {
		t.Fatalf("the operator is not told --metrics-secure: %s", args)
	}
	pm := find(objs, "PodMonitor")
	if len(pm) != 1 {
		t.Fatalf("%d PodMonitors", len(pm))
	}
	eps, _, _ := unstructured.NestedSlice(pm[0].Object, "spec", "podMetricsEndpoints")
	ep, _ := eps[0].(map[string]any)
	scheme, _, _ := unstructured.NestedString(ep, "scheme")
	caSecret, _, _ := unstructured.NestedString(ep, "tlsConfig", "ca", "secret", "name")
	serverName, _, _ := unstructured.NestedString(ep, "tlsConfig", "serverName")
	tokenSecret, _, _ := unstructured.NestedString(ep, "authorization", "credentials", "name")
	tokenKey, _, _ := unstructured.NestedString(ep, "authorization", "credentials", "key")
	if scheme != "https" || caSecret != "bloodraven-auxiliary-tls" || tokenKey != "token" {
		t.Fatalf("PodMonitor endpoint: %v", ep)
	}
	var dnsNames []string
	for _, c := range find(objs, "Certificate") {
		if c.GetName() == "metrics-bloodraven-serving" {
			dnsNames, _, _ = unstructured.NestedStringSlice(c.Object, "spec", "dnsNames")
		}
	}
	if !slices.Contains(dnsNames, serverName) {
		t.Fatalf("the PodMonitor verifies %q, which the serving certificate %v does not carry", serverName, dnsNames)
	}
	var scraper string
	for _, s := range find(objs, "Secret") {
		if s.GetName() == tokenSecret {
			if typ, _, _ := unstructured.NestedString(s.Object, "type"); typ == "kubernetes.io/service-account-token" {
				scraper = s.GetAnnotations()["kubernetes.io/service-account.name"]
			}
		}
	}
	if scraper == "" {
		t.Fatalf("the PodMonitor's credentials %q are no ServiceAccount token Secret of the render", tokenSecret)
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding":
		default:
			continue
		}
		//lint:ignore SA1019 a server-side apply of arbitrary unstructured objects; client.Client.Apply takes typed apply configurations
		if err := env.Client.Patch(ctx, o, client.Apply, client.FieldOwner("helm-chart-test"), client.ForceOwnership); err != nil {
			t.Fatalf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}
	may := func(user string) bool {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
			Groups:                []string{"system:serviceaccounts", "system:serviceaccounts:" + release, "system:authenticated"},
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}}}
		got, err := env.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got.Status.Allowed
	}
	user := "system:serviceaccount:" + release + ":" + scraper
	deadline := time.Now().Add(10 * time.Second)
	for !may(user) {
		if time.Now().After(deadline) {
			t.Fatalf("%s may not get /metrics", user)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if may("system:serviceaccount:" + release + ":someone-else") {
		t.Fatal("any ServiceAccount of the namespace may get /metrics")
	}

	plain, err := renderRelease(t, release, release, "metrics.secure=false", "monitoring.podMonitor.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	objs = docs(t, plain)
	eps, _, _ = unstructured.NestedSlice(find(objs, "PodMonitor")[0].Object, "spec", "podMetricsEndpoints")
	if ep, _ := eps[0].(map[string]any); ep["scheme"] != nil || ep["authorization"] != nil || len(find(objs, "Secret")) != 0 ||
		strings.Contains(fmt.Sprint(podSpec(t, objs)["containers"]), "--metrics-secure") {
		t.Fatalf("metrics.secure=false rendered secure scraping: %v", ep)
	}
}
