package charts

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/shipstream/bloodraven/webhook"
)

// The operator's own writes never wait on its own webhooks (docs/fence.md,
// "Invariants"): every webhook the chart renders (each one generated
// from the markers) skips the release's operator with package webhook's
// match condition, and the fence guard, which holds the operator's fence
// moves instead, is package webhook's object for object, in both modes and
// for any release, namespace and ServiceAccount. webhooks.enabled=false
// renders neither.
func TestTheOperatorsWritesSkipTheWebhooks(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir(), "files", "webhooks.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var generated admissionregistrationv1.ValidatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(data, &generated); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		release, namespace string
		sets               []string
		operator           string   // the operator's user name
		guard              string   // the fence guard's name
		namespaces         []string // the fence guard's binding; nil: the whole cluster
	}{
		"cluster-wide": {release: "bloodraven", namespace: "bloodraven",
			operator: "system:serviceaccount:bloodraven:bloodraven", guard: "bloodraven-fence-guard"},
		"namespaced": {release: "bloodraven", namespace: "bloodraven", sets: cases["namespaced"],
			operator: "system:serviceaccount:bloodraven:bloodraven", guard: "bloodraven-fence-guard", namespaces: []string{"team-b", "team-a"}},
		"another release, namespace and service account": {release: "orders", namespace: "databases", sets: []string{"serviceAccount.name=ops-bot"},
			operator: "system:serviceaccount:databases:ops-bot", guard: "orders-bloodraven-fence-guard"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := renderRelease(t, tc.release, tc.namespace, tc.sets...)
			if err != nil {
				t.Fatal(err)
			}
			objs := docs(t, out)
			var vwc admissionregistrationv1.ValidatingWebhookConfiguration
			typed(t, only(t, objs, "ValidatingWebhookConfiguration"), &vwc)
			if len(vwc.Webhooks) != len(generated.Webhooks) {
				t.Fatalf("the chart renders %d webhooks, the markers generate %d", len(vwc.Webhooks), len(generated.Webhooks))
			}
			want := []admissionregistrationv1.MatchCondition{webhook.NotTheOperator(tc.operator)}
			for _, w := range vwc.Webhooks {
				if !reflect.DeepEqual(w.MatchConditions, want) {
					t.Errorf("webhook %s: matchConditions %+v, want %+v", w.Name, w.MatchConditions, want)
				}
			}
			wantPolicy, wantBinding := webhook.FenceGuard(webhook.FenceGuardOptions{Name: tc.guard, OperatorUsername: tc.operator, Namespaces: tc.namespaces})
			var policy admissionregistrationv1.ValidatingAdmissionPolicy
			var binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
			typed(t, named(t, objs, "ValidatingAdmissionPolicy", tc.guard), &policy)
			typed(t, named(t, objs, "ValidatingAdmissionPolicyBinding", tc.guard), &binding)
			for _, o := range []metav1.Object{&policy, &binding} {
				if o.GetLabels()["app.kubernetes.io/instance"] != tc.release {
					t.Errorf("%s carries no release labels: %v", o.GetName(), o.GetLabels())
				}
				o.SetLabels(nil)
			}
			same(t, &policy, wantPolicy)
			same(t, &binding, wantBinding)
		})
	}
	out, err := render(t, "webhooks.enabled=false")
	if err != nil {
		t.Fatal(err)
	}
	objs := docs(t, out)
	if len(find(objs, "ValidatingWebhookConfiguration")) != 0 || len(findNamed(objs, "ValidatingAdmissionPolicy", "bloodraven-fence-guard")) != 0 {
		t.Fatal("webhooks.enabled=false still renders the webhooks or the fence guard")
	}
}
