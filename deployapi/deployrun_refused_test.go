package deployapi

import (
	"net/http"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

const runsRefused = "DeployRun writes refused for this test"

// refuseRunWrites makes the API server refuse every DeployRun write in ns
// (a ValidatingAdmissionPolicy bound to ns alone), as an RBAC change or an
// unreachable webhook would, and waits until it is enforced.
func (f *fixture) refuseRunWrites(ns string) {
	f.t.Helper()
	name := "refuse-deployruns-" + ns
	fail := admissionregistrationv1.Fail
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{bloodravenv1alpha1.GroupVersion.Group}, APIVersions: []string{"*"},
						Resources: []string{"deployruns", "deployruns/status"}},
				}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: runsRefused}},
		}}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}}}}}
	for _, obj := range []client.Object{policy, binding} {
		if err := env.Client.Create(f.ctx, obj); err != nil {
			f.t.Fatal(err)
		}
		f.t.Cleanup(func() { _ = env.Client.Delete(f.ctx, obj) })
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		probe := &bloodravenv1alpha1.DeployRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"},
			Spec: bloodravenv1alpha1.DeployRunSpec{GroupRef: bloodravenv1alpha1.GroupReference{Name: "playground"}, Instance: "counter-app", OperationID: "probe"}}
		err := env.Client.Create(f.ctx, probe, client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), runsRefused) {
			return
		}
		if err != nil {
			f.t.Fatalf("probe: %v", err)
		}
		if time.Now().After(deadline) {
			f.t.Fatal("the API server never refused DeployRun writes")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The API server refuses every DeployRun write: grants, renewals, the DDL
// boundary, releases and take-overs answer as they do without run history,
// and the leases hold what they would. The run is history, not authority.
func TestRefusedDeployRunWritesChangeNoAnswer(t *testing.T) {
	f := newFixture(t)
	f.refuseRunWrites(f.groupNS)

	g := f.grant("migration", "op-1", http.StatusCreated)
	f.grant("failover-hold", "op-1", http.StatusCreated)
	f.renewPhase("op-1", g.str("token"), "done")
	if r := f.do(http.MethodDelete, leasePath("migration", "op-1"), f.token, nil, "X-Lease-Token", g.str("token"),
		"X-Deploy-Outcome", "succeeded"); r.status != http.StatusNoContent {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}
	f.grant("migration", "op-2", http.StatusCreated)
	f.clock.Step(31 * time.Second)
	r := f.grant("migration", "op-3", http.StatusCreated) // a take-over of op-2's lapsed mutex
	f.renewPhase("op-3", r.str("token"), "ddl")

	if n := len(f.runs()); n != 0 {
		t.Fatalf("%d DeployRuns written while refused", n)
	}
	logs := strings.Join(f.logs.all(), "\n")
	if !strings.Contains(logs, "DeployRun not written") || strings.Contains(logs, r.str("token")) || strings.Contains(logs, g.str("token")) {
		t.Fatalf("want the refusal logged, without a lease token:\n%s", logs)
	}
}
