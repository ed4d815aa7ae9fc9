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
	policy, binding := leaseDenial("deny-lease-updates-"+ns, ns, &metav1.LabelSelector{MatchLabels: map[string]string{label: "true"}},
		admissionregistrationv1.Update, "test: deployment Lease updates are denied")
	// The probe is no deployment Lease (the lease guard of a playground
	// would refuse the test's own writes of one whatever this policy
	// does): a second binding of the same policy selects it, and both
	// bindings take effect together.
	const probeLabel = "testenv.bloodraven.shipstream.io/deny-probe"
	probeBinding := binding.DeepCopy()
	probeBinding.Name += "-probe"
	probeBinding.Spec.MatchResources = &admissionregistrationv1.MatchResources{ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{probeLabel: "true"}}}
	for _, o := range []client.Object{policy, binding, probeBinding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("create %s: %v", o.GetName(), err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), o) })
	}
	probe := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "deny-probe", Namespace: ns,
		Labels: map[string]string{probeLabel: "true"}}}
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

// DenyTombstones installs a real ValidatingAdmissionPolicy and binding that
// refuse the CREATE of every Lease in namespace ns whose label
// bloodraven.shipstream.io/kind is "tombstone" or "tombstone-pending", for
// every user (the operator included), and waits until the API server
// enforces it. The returned func removes it and waits until creates pass
// again; it is also removed when the test ends. Tests use it to hold a
// revocation back, so a lease can end between a move and its bookkeeping.
func DenyTombstones(t testing.TB, ctx context.Context, c client.Client, ns string) (allow func()) {
	t.Helper()
	const kindLabel = "bloodraven.shipstream.io/kind"
	policy, binding := leaseDenial("deny-tombstones-"+ns, ns, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: kindLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{"tombstone", "tombstone-pending"}}}},
		admissionregistrationv1.Create, "test: tombstones are denied")
	objs := []client.Object{policy, binding}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("create %s: %v", o.GetName(), err)
		}
	}
	probe := func(i int) error {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("deny-tombstone-probe-%d", i), Namespace: ns,
			Labels: map[string]string{kindLabel: "tombstone-pending"}}}
		err := c.Create(ctx, l)
		if err == nil {
			_ = c.Delete(ctx, l)
		}
		return err
	}
	waitUntil := func(enforced bool) {
		deadline := time.Now().Add(30 * time.Second)
		for i := 0; ; i++ {
			if err := probe(i); (err != nil) == enforced {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the tombstone policy never took effect (enforced=%v)", enforced)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitUntil(true)
	removed := false
	allow = func() {
		if removed {
			return
		}
		removed = true
		for _, o := range []client.Object{binding, policy} {
			_ = c.Delete(context.Background(), o)
		}
		waitUntil(false)
	}
	t.Cleanup(func() {
		if !removed {
			removed = true
			for _, o := range []client.Object{binding, policy} {
				_ = c.Delete(context.Background(), o)
			}
		}
	})
	return allow
}

// leaseDenial is a ValidatingAdmissionPolicy (and its binding) that refuses
// op on the Leases in namespace ns that objects selects, for every user.
func leaseDenial(name, ns string, objects *metav1.LabelSelector, op admissionregistrationv1.OperationType, msg string) (
	*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{op},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"leases"}},
				}}},
			},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: msg}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources:    &admissionregistrationv1.MatchResources{ObjectSelector: objects}},
	}
	return policy, binding
}
