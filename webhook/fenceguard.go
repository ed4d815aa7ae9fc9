package webhook

import (
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// FenceGuardOperatorVariable is the variable FenceGuard prepends to
// FenceGuardSpec's: the operator's user name, as a CEL string literal.
const FenceGuardOperatorVariable = "operatorUsername"

// FenceGuardOptions are the parts of the fence guard that differ between
// installations.
type FenceGuardOptions struct {
	// Name of the policy and of its binding.
	Name string
	// OperatorUsername is the operator's user name,
	// system:serviceaccount:<namespace>:<serviceaccount>.
	OperatorUsername string
	// Namespaces, when not empty, are the only namespaces the binding
	// covers (the operator's watched namespaces). Empty: the whole cluster.
	Namespaces []string
}

// FenceGuard returns the fence guard: a ValidatingAdmissionPolicy and the
// binding that enforces it (validationActions Deny), both named opts.Name.
// It holds the operator's own status writes to the rules of the fence: the
// generation never decreases, moves by exactly one, and only together with
// a change of active site to a declared site, or with the transition the
// operator announced in status.transition (restore in place). The API server
// evaluates it in process, so it costs the operator's writes no call to a
// replica, unlike the status webhook, which the operator's writes skip
// (NotTheOperator) and which refuses everyone else any status change.
// The policy's spec is FenceGuardSpec with opts' user name prepended as a
// variable, so that its validations are the same text everywhere.
func FenceGuard(opts FenceGuardOptions) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	spec := FenceGuardSpec()
	spec.Variables = append([]admissionregistrationv1.Variable{
		{Name: FenceGuardOperatorVariable, Expression: literal(opts.OperatorUsername)},
	}, spec.Variables...)
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: opts.Name},
		Spec:       spec,
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: opts.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        opts.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	if len(opts.Namespaces) > 0 {
		binding.Spec.MatchResources = &admissionregistrationv1.MatchResources{
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key:      "kubernetes.io/metadata.name",
				Operator: metav1.LabelSelectorOpIn,
				Values:   sortedOnce(opts.Namespaces),
			}}},
		}
	}
	return policy, binding
}

// FenceGuardSpec is the part of the fence guard's spec that is the same for
// every installation: all but the leading variable FenceGuard adds
// (FenceGuardOperatorVariable). hack/fenceguard writes it to the chart.
func FenceGuardSpec() admissionregistrationv1.ValidatingAdmissionPolicySpec {
	// Each validation passes unless the operator moves the fence; the
	// first that fails is the one the API server reports, so they are in
	// the order of the cases of one switch.
	rule := func(expr, message, messageExpr string) admissionregistrationv1.Validation {
		return admissionregistrationv1.Validation{
			Expression:        "!variables.moves || " + expr,
			Message:           message,
			MessageExpression: messageExpr,
			Reason:            ptr.To(metav1.StatusReasonInvalid),
		}
	}
	return admissionregistrationv1.ValidatingAdmissionPolicySpec{
		FailurePolicy: ptr.To(admissionregistrationv1.Fail),
		MatchConstraints: &admissionregistrationv1.MatchResources{
			MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
			ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{
						APIGroups:   []string{bloodravenv1alpha1.GroupVersion.Group},
						APIVersions: []string{bloodravenv1alpha1.GroupVersion.Version},
						Resources:   []string{"mysqlfailovergroups/status"},
					},
				},
			}},
		},
		Variables: []admissionregistrationv1.Variable{
			{Name: "oldGeneration", Expression: "oldObject.?status.?topologyGeneration.orValue(0)"},
			{Name: "generation", Expression: "object.?status.?topologyGeneration.orValue(0)"},
			{Name: "oldSite", Expression: "oldObject.?status.?activeSite.orValue('')"},
			{Name: "site", Expression: "object.?status.?activeSite.orValue('')"},
			// Only the operator's writes: anyone else's change of the
			// fence is the status webhook's to refuse, with what to do
			// instead.
			{Name: "moves", Expression: "request.userInfo.username == variables." + FenceGuardOperatorVariable +
				" && (variables.generation != variables.oldGeneration || variables.site != variables.oldSite)"},
			{Name: "announced", Expression: "oldObject.?status.?transition.hasValue()" +
				" && oldObject.status.transition.generation == variables.generation" +
				" && oldObject.status.transition.targetSite == variables.site"},
		},
		Validations: []admissionregistrationv1.Validation{
			rule("variables.generation >= variables.oldGeneration",
				"status.topologyGeneration: the topology generation never decreases",
				"'status.topologyGeneration: the topology generation never decreases (was ' + string(variables.oldGeneration) + ', the update writes ' + string(variables.generation) + ')'"),
			rule("variables.generation <= variables.oldGeneration + 1",
				"status.topologyGeneration: the topology generation moves by exactly one",
				"'status.topologyGeneration: the topology generation moves by exactly one (was ' + string(variables.oldGeneration) + ', the update writes ' + string(variables.generation) + ')'"),
			rule("variables.generation != variables.oldGeneration",
				"status.activeSite: the active site changes only together with topologyGeneration+1", ""),
			rule("variables.site != ''",
				"status.activeSite: a promotion names the new active site", ""),
			rule("variables.site != variables.oldSite || variables.announced",
				"status.topologyGeneration: the topology generation moves only with a change of active site, or with the transition announced in status.transition", ""),
			rule("object.spec.sites.exists(s, s.name == variables.site)",
				"status.activeSite: the new active site is not one of spec.sites",
				"'status.activeSite: ' + variables.site + ' is not one of spec.sites'"),
		},
	}
}

// sortedOnce is names sorted, each once.
func sortedOnce(names []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}
