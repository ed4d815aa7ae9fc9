package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DenyLeaseUpdates installs a real ValidatingAdmissionPolicy and binding that
// refuse every UPDATE of a Lease labelled label=true in namespace ns, for
// every user (the operator included), and waits until the API server
// enforces it. It is removed when the test ends. Tests use it to break lease
// bookkeeping the way a broken policy, a quota or a misbehaving webhook
// would on a real cluster.
func DenyLeaseUpdates(t testing.TB, ctx context.Context, c client.Client, ns, label string) {
	t.Helper()
	name := "deny-lease-updates-" + ns
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
				ObjectSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{label: "true"}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"leases"}},
				}}},
			},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: "test: deployment Lease updates are denied"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("create %s: %v", o.GetName(), err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), o) })
	}
	probe := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "deny-probe", Namespace: ns,
		Labels: map[string]string{label: "true"}}}
	if err := c.Create(ctx, probe); err != nil {
		t.Fatalf("create probe lease: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), probe) })
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		probe.Spec.HolderIdentity = ptr.To(fmt.Sprint(i))
		if err := c.Update(ctx, probe); err != nil {
			return // enforced
		}
		if time.Now().After(deadline) {
			t.Fatal("the ValidatingAdmissionPolicy never took effect")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
