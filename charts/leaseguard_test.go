package charts

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/shipstream/bloodraven/internal/scene"
	"github.com/shipstream/bloodraven/leaseguard"
)

// typed decodes a rendered object into out, refusing unknown fields.
func typed(t *testing.T, u *unstructured.Unstructured, out any) {
	t.Helper()
	data, err := yaml.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, out); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

// findNamed returns the objects of kind named name in objs.
func findNamed(objs []*unstructured.Unstructured, kind, name string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range find(objs, kind) {
		if o.GetName() == name {
			out = append(out, o)
		}
	}
	return out
}

// named returns the one object of kind named name in objs.
func named(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	found := findNamed(objs, kind, name)
	if len(found) != 1 {
		t.Fatalf("%d %s %s in the render, want 1", len(found), kind, name)
	}
	return found[0]
}

// only returns the one object of kind in objs.
func only(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	found := find(objs, kind)
	if len(found) != 1 {
		t.Fatalf("%d %s in the render, want 1", len(found), kind)
	}
	return found[0]
}

// The chart's lease guard is package leaseguard's, object for object: the
// generated files/lease-guard.yaml plus the release's variables and
// binding equal what Policy builds for the same release, in both modes.
func TestTheChartsLeaseGuardIsThePackages(t *testing.T) {
	tests := map[string]struct {
		sets           []string
		serviceAccount string
		namespaces     []string
	}{
		"cluster-wide": {nil, "bloodraven", nil},
		"namespaced":   {cases["namespaced"], "bloodraven", []string{"team-b", "team-a"}},
		"another service account": {[]string{"serviceAccount.name=ops-bot", watchNamespaces}, "ops-bot",
			[]string{"team-b", "team-a"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := render(t, tc.sets...)
			if err != nil {
				t.Fatal(err)
			}
			objs := docs(t, out)
			wantPolicy, wantBinding := leaseguard.Policy(leaseguard.Options{
				Name:                    "bloodraven-lease-guard",
				OperatorUsername:        "system:serviceaccount:bloodraven:" + tc.serviceAccount,
				LeaderElectionNamespace: "bloodraven",
				LeaderElectionLease:     "bloodraven-leader",
				Namespaces:              tc.namespaces,
			})
			var policy admissionregistrationv1.ValidatingAdmissionPolicy
			var binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
			typed(t, named(t, objs, "ValidatingAdmissionPolicy", "bloodraven-lease-guard"), &policy)
			typed(t, named(t, objs, "ValidatingAdmissionPolicyBinding", "bloodraven-lease-guard"), &binding)
			for _, o := range []metav1.Object{&policy, &binding} {
				if o.GetLabels()["app.kubernetes.io/instance"] != "bloodraven" {
					t.Errorf("%s carries no release labels: %v", o.GetName(), o.GetLabels())
				}
				o.SetLabels(nil)
			}
			same(t, &policy, wantPolicy)
			same(t, &binding, wantBinding)
		})
	}
	if out, err := render(t, "leaseGuard.enabled=false"); err != nil || len(findNamed(docs(t, out), "ValidatingAdmissionPolicy", "bloodraven-lease-guard")) != 0 {
		t.Fatalf("leaseGuard.enabled=false still renders the guard (err %v)", err)
	}
}

func same(t *testing.T, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		g, _ := yaml.Marshal(got)
		w, _ := yaml.Marshal(want)
		t.Fatalf("the chart renders\n%s\nthe package builds\n%s", g, w)
	}
}

// The names and flags the operator must match, and the namespaced mode's
// scope: the webhooks and the fence guard on the watched namespaces, the
// lease guard on those and the release namespace, the operator told which to
// watch.
func TestTheOperatorIsToldItsNamesAndNamespaces(t *testing.T) {
	tests := map[string]struct {
		sets                       []string
		watch                      string // the --watch-namespaces flag, "" for none
		webhookNamespaces, guarded []string
	}{
		"cluster-wide": {sets: nil},
		"namespaced": {sets: cases["namespaced"], watch: "--watch-namespaces=team-a,team-b",
			webhookNamespaces: []string{"team-a", "team-b"}, guarded: []string{"bloodraven", "team-a", "team-b"}},
		"a watched namespace twice, and the release's own": {sets: []string{"watchNamespaces={team-a,bloodraven,team-a}"},
			watch: "--watch-namespaces=bloodraven,team-a", webhookNamespaces: []string{"bloodraven", "team-a"}, guarded: []string{"bloodraven", "team-a"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := render(t, tc.sets...)
			if err != nil {
				t.Fatal(err)
			}
			objs := docs(t, out)
			var d appsv1.Deployment
			typed(t, only(t, objs, "Deployment"), &d)
			args := d.Spec.Template.Spec.Containers[0].Args
			want := []string{"--leader-election-id=bloodraven-leader", "--record-key-secret=bloodraven-lease-record-key",
				"--lease-guard-policy=bloodraven-lease-guard"}
			if tc.watch != "" {
				want = append(want, tc.watch)
			}
			// The names come first; the tuning flags (values.operator, logLevel)
			// follow them.
			if len(args) < len(want) || strings.Join(args[:len(want)], " ") != strings.Join(want, " ") ||
				(len(args) > len(want) && !strings.HasPrefix(args[len(want)], "--zap-log-level=")) {
				t.Errorf("operator args %q, want them to begin with %q and go on with the tuning flags", args, want)
			}
			var vwc admissionregistrationv1.ValidatingWebhookConfiguration
			typed(t, only(t, objs, "ValidatingWebhookConfiguration"), &vwc)
			for _, w := range vwc.Webhooks {
				if got := selected(w.NamespaceSelector); !reflect.DeepEqual(got, tc.webhookNamespaces) {
					t.Errorf("webhook %s selects namespaces %v, want %v (nil: all)", w.Name, got, tc.webhookNamespaces)
				}
			}
			for guard, want := range map[string][]string{"bloodraven-lease-guard": tc.guarded, "bloodraven-fence-guard": tc.webhookNamespaces} {
				var binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
				typed(t, named(t, objs, "ValidatingAdmissionPolicyBinding", guard), &binding)
				var sel *metav1.LabelSelector
				if binding.Spec.MatchResources != nil {
					sel = binding.Spec.MatchResources.NamespaceSelector
				}
				if got := selected(sel); !reflect.DeepEqual(got, want) {
					t.Errorf("%s covers namespaces %v, want %v (nil: all)", guard, got, want)
				}
			}
		})
	}
}

// selected is the namespace list of a kubernetes.io/metadata.name In
// selector, nil for none.
func selected(s *metav1.LabelSelector) []string {
	if s == nil {
		return nil
	}
	if len(s.MatchLabels) > 0 || len(s.MatchExpressions) != 1 || s.MatchExpressions[0].Key != "kubernetes.io/metadata.name" ||
		s.MatchExpressions[0].Operator != metav1.LabelSelectorOpIn {
		return []string{"unexpected selector"}
	}
	return s.MatchExpressions[0].Values
}

// In the namespaced mode the ClusterRole grants nothing namespaced, and each
// watched namespace's Role grants nothing that is not: the API server's
// discovery decides, so that a new RBAC marker the chart does not classify
// fails here.
func TestTheNamespacedModeGrantsNothingNamespacedClusterWide(t *testing.T) {
	_, lists, err := env.Kube.Discovery().ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	namespaced := map[string]bool{} // group/resource
	for _, l := range lists {
		gv := strings.Split(l.GroupVersion, "/")
		group := ""
		if len(gv) == 2 {
			group = gv[0]
		}
		for _, r := range l.APIResources {
			namespaced[group+"/"+strings.Split(r.Name, "/")[0]] = r.Namespaced
		}
	}
	scopeOf := func(t *testing.T, rule rbacv1.PolicyRule) map[string]bool {
		out := map[string]bool{}
		for _, g := range rule.APIGroups {
			for _, r := range rule.Resources {
				key := g + "/" + strings.Split(r, "/")[0]
				ns, ok := namespaced[key]
				if !ok {
					t.Fatalf("the API server does not serve %s", key)
				}
				out[key] = ns
			}
		}
		return out
	}
	out, err := render(t, cases["namespaced"]...)
	if err != nil {
		t.Fatal(err)
	}
	objs := docs(t, out)
	var cr rbacv1.ClusterRole
	typed(t, named(t, objs, "ClusterRole", "bloodraven"), &cr) // not <fullname>-metrics-reader (metrics.secure)
	granted := map[string]bool{}
	for _, rule := range cr.Rules {
		for key, ns := range scopeOf(t, rule) {
			if ns {
				t.Errorf("the namespaced mode's ClusterRole grants %s %v, which is namespaced", key, rule.Verbs)
			}
			granted[key] = true
		}
	}
	roles := map[string]rbacv1.Role{}
	for _, u := range find(objs, "Role") {
		var r rbacv1.Role
		typed(t, u, &r)
		roles[r.Namespace+"/"+r.Name] = r
	}
	for _, ns := range []string{"team-a", "team-b"} {
		r, ok := roles[ns+"/bloodraven"]
		if !ok {
			t.Fatalf("no Role in the watched namespace %s: %v", ns, roles)
		}
		for _, rule := range r.Rules {
			for key, isNS := range scopeOf(t, rule) {
				if !isNS {
					t.Errorf("the Role in %s grants %s, which is not namespaced", ns, key)
				}
				granted[key] = true
			}
		}
	}
	// Every generated rule is granted somewhere.
	var generated rbacv1.ClusterRole
	b, err := os.ReadFile(filepath.Join(chartDir(), "files", "clusterrole.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &generated); err != nil {
		t.Fatal(err)
	}
	for _, rule := range generated.Rules {
		for key := range scopeOf(t, rule) {
			if !granted[key] {
				t.Errorf("the generated rule for %s is granted nowhere in the namespaced mode", key)
			}
		}
	}
}

// access is one SubjectAccessReview: may the operator do verb on
// group/resource (ns/name)?
type access struct {
	ns, verb, group, resource, name string
	allowed                         bool
}

// The RBAC of both modes, installed for real and asked through
// SubjectAccessReviews: the table of the chart's README.
func TestTheOperatorsAccessInBothModes(t *testing.T) {
	ctx := context.Background()
	for _, ns := range []string{"team-a", "team-b", "team-c", "rbac-cluster", "rbac-namespaced"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
	}
	const crd = "bloodraven.shipstream.io"
	const guardGroup = "admissionregistration.k8s.io"
	tests := map[string]struct {
		release string
		sets    []string
		access  map[string]access
	}{
		"cluster-wide": {release: "rbac-cluster", access: map[string]access{
			"deployment leases in any namespace":       {ns: "team-c", verb: "create", group: "coordination.k8s.io", resource: "leases", allowed: true},
			"deployment lease updates":                 {ns: "team-c", verb: "update", group: "coordination.k8s.io", resource: "leases", allowed: true},
			"deployment lease deletes":                 {ns: "team-c", verb: "delete", group: "coordination.k8s.io", resource: "leases", allowed: true},
			"the lease cache":                          {ns: "", verb: "watch", group: "coordination.k8s.io", resource: "leases", allowed: true},
			"MySQL credentials":                        {ns: "team-c", verb: "get", group: "", resource: "secrets", allowed: true},
			"no listing of Secrets":                    {ns: "team-c", verb: "list", group: "", resource: "secrets"},
			"no Secret created in a group's namespace": {ns: "team-c", verb: "create", group: "", resource: "secrets"},
			"the record key created":                   {ns: "rbac-cluster", verb: "create", group: "", resource: "secrets", allowed: true},
			"groups updated":                           {ns: "team-c", verb: "update", group: crd, resource: "mysqlfailovergroups", allowed: true},
			"group status":                             {ns: "team-c", verb: "update", group: crd, resource: "mysqlfailovergroups/status", allowed: true},
			"databases read only":                      {ns: "team-c", verb: "update", group: crd, resource: "mysqldatabases"},
			"events":                                   {ns: "team-c", verb: "create", group: "", resource: "events", allowed: true},
			"token reviews":                            {verb: "create", group: "authentication.k8s.io", resource: "tokenreviews", allowed: true},
			"access reviews (metrics.secure)":          {verb: "create", group: "authorization.k8s.io", resource: "subjectaccessreviews", allowed: true},
			"its lease guard":                          {verb: "get", group: guardGroup, resource: "validatingadmissionpolicies", name: "rbac-cluster-bloodraven-lease-guard", allowed: true},
			"its lease guard's binding":                {verb: "get", group: guardGroup, resource: "validatingadmissionpolicybindings", name: "rbac-cluster-bloodraven-lease-guard", allowed: true},
			"its own Pod's leader label":               {ns: "rbac-cluster", verb: "patch", group: "", resource: "pods", allowed: true},
			"no Pod elsewhere":                         {ns: "team-c", verb: "patch", group: "", resource: "pods"},
		}},
		"namespaced": {release: "rbac-namespaced", sets: []string{watchNamespaces}, access: map[string]access{
			"deployment leases in a watched namespace": {ns: "team-a", verb: "create", group: "coordination.k8s.io", resource: "leases", allowed: true},
			"deployment lease deletes":                 {ns: "team-b", verb: "delete", group: "coordination.k8s.io", resource: "leases", allowed: true},
			"no Lease in another namespace":            {ns: "team-c", verb: "create", group: "coordination.k8s.io", resource: "leases"},
			"no cluster-wide lease cache":              {ns: "", verb: "watch", group: "coordination.k8s.io", resource: "leases"},
			"its leader-election Lease created":        {ns: "rbac-namespaced", verb: "create", group: "coordination.k8s.io", resource: "leases", allowed: true},
			"its leader-election Lease renewed":        {ns: "rbac-namespaced", verb: "update", group: "coordination.k8s.io", resource: "leases", name: "bloodraven-leader", allowed: true},
			"no other Lease of the release namespace":  {ns: "rbac-namespaced", verb: "update", group: "coordination.k8s.io", resource: "leases", name: "other"},
			"MySQL credentials in a watched namespace": {ns: "team-a", verb: "get", group: "", resource: "secrets", allowed: true},
			"no Secret of another namespace":           {ns: "team-c", verb: "get", group: "", resource: "secrets"},
			"the record key":                           {ns: "rbac-namespaced", verb: "get", group: "", resource: "secrets", name: "rbac-namespaced-bloodraven-lease-record-key", allowed: true},
			"the record key created":                   {ns: "rbac-namespaced", verb: "create", group: "", resource: "secrets", allowed: true},
			"no other Secret of the release namespace": {ns: "rbac-namespaced", verb: "get", group: "", resource: "secrets", name: "other"},
			"groups of a watched namespace":            {ns: "team-b", verb: "list", group: crd, resource: "mysqlfailovergroups", allowed: true},
			"no groups of the cluster":                 {ns: "", verb: "list", group: crd, resource: "mysqlfailovergroups"},
			"group status":                             {ns: "team-a", verb: "patch", group: crd, resource: "mysqlfailovergroups/status", allowed: true},
			"events of a watched namespace":            {ns: "team-a", verb: "create", group: "", resource: "events", allowed: true},
			"events of the leader election":            {ns: "rbac-namespaced", verb: "create", group: "", resource: "events", allowed: true},
			"no events elsewhere":                      {ns: "team-c", verb: "create", group: "", resource: "events"},
			"token reviews":                            {verb: "create", group: "authentication.k8s.io", resource: "tokenreviews", allowed: true},
			"access reviews (metrics.secure)":          {verb: "create", group: "authorization.k8s.io", resource: "subjectaccessreviews", allowed: true},
			"its lease guard":                          {verb: "get", group: guardGroup, resource: "validatingadmissionpolicies", name: "rbac-namespaced-bloodraven-lease-guard", allowed: true},
			"its own Pod's leader label":               {ns: "rbac-namespaced", verb: "patch", group: "", resource: "pods", allowed: true},
			"no Pod of a watched namespace":            {ns: "team-a", verb: "patch", group: "", resource: "pods"},
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := renderRelease(t, tc.release, tc.release, tc.sets...)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range docs(t, out) {
				switch o.GetKind() {
				case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
				default:
					continue
				}
				//lint:ignore SA1019 a server-side apply of arbitrary unstructured objects; client.Client.Apply takes typed apply configurations
				if err := env.Client.Patch(ctx, o, client.Apply, client.FieldOwner("helm-chart-test"), client.ForceOwnership); err != nil {
					t.Fatalf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
				}
				t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
			}
			user := "system:serviceaccount:" + tc.release + ":bloodraven"
			groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + tc.release, "system:authenticated"}
			allowed := func(a access) bool {
				resource, sub, _ := strings.Cut(a.resource, "/")
				sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups,
					ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: a.ns, Verb: a.verb, Group: a.group,
						Resource: resource, Subresource: sub, Name: a.name}}}
				got, err := env.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return got.Status.Allowed
			}
			// The authorizer learns of new RBAC objects through its
			// informers: wait for every grant before checking refusals.
			for what, a := range tc.access {
				if !a.allowed {
					continue
				}
				deadline := time.Now().Add(10 * time.Second)
				for !allowed(a) {
					if time.Now().After(deadline) {
						t.Errorf("%s: the operator may not %s %s %s/%s", what, a.verb, a.resource, a.ns, a.name)
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			for what, a := range tc.access {
				if !a.allowed && allowed(a) {
					t.Errorf("%s: the operator may %s %s %s/%s", what, a.verb, a.resource, a.ns, a.name)
				}
			}
		})
	}
}

// With flowControl, the API server puts the operator's requests, resource
// and non-resource alike, in the chart's FlowSchema and priority level (it
// says so in the X-Kubernetes-PF-* response headers).
func TestTheOperatorHasAPriorityLevelOfItsOwn(t *testing.T) {
	ctx := context.Background()
	const release = "apf"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: release}}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	out, err := renderRelease(t, release, release)
	if err != nil {
		t.Fatal(err)
	}
	objs := docs(t, out)
	var uids []string
	for _, kind := range []string{"PriorityLevelConfiguration", "FlowSchema"} {
		o := only(t, objs, kind)
		//lint:ignore SA1019 a server-side apply of arbitrary unstructured objects; client.Client.Apply takes typed apply configurations
		if err := env.Client.Patch(ctx, o, client.Apply, client.FieldOwner("helm-chart-test"), client.ForceOwnership); err != nil {
			t.Fatalf("apply %s: %v", kind, err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
		uids = append(uids, string(o.GetUID()))
	}
	var fs flowcontrolv1.FlowSchema
	typed(t, only(t, objs, "FlowSchema"), &fs)
	if fs.Spec.MatchingPrecedence >= 9000 || fs.Spec.DistinguisherMethod == nil || fs.Spec.DistinguisherMethod.Type != flowcontrolv1.FlowDistinguisherMethodByUserType {
		t.Fatalf("FlowSchema %+v: want a precedence before service-accounts' 9000, distinguished by user", fs.Spec)
	}
	token, err := scene.Token(ctx, env.Kube, release, "bloodraven", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = token
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/api/v1/namespaces/team-c/leases", "/version"} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := hc.Get(cfg.Host + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got := []string{resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID"), resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID")}
			if reflect.DeepEqual(got, uids) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s as the operator: priority level and flow schema %v, want the chart's %v", path, got, uids)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
