package leaseguard

import (
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// What makes a Lease a deployment Lease. The operator names every
// deployment Lease with NamePrefix (leases.MigrationName, HoldName,
// TombstoneName) and labels it with Label (leasestore.LabelDeployLease); a
// test holds these equal to theirs.
const (
	NamePrefix = "bloodraven-"
	Label      = "bloodraven.shipstream.io/deployment-lease"
)

// CleanupUsers may delete deployment Leases besides the operator: the
// garbage collector (owner references), the namespace controller (namespace
// deletion), and kube-controller-manager's own user name, which both act as
// on clusters that run controllers without per-controller credentials.
var CleanupUsers = []string{
	"system:serviceaccount:kube-system:generic-garbage-collector",
	"system:serviceaccount:kube-system:namespace-controller",
	"system:kube-controller-manager",
}

// The variables Policy prepends to ConstantSpec's, one string literal each.
const (
	VariableOperatorUsername        = "operatorUsername"
	VariableLeaderElectionNamespace = "leaderElectionNamespace"
	VariableLeaderElectionName      = "leaderElectionName"
)

// Messages of the two validations.
const (
	MessageNotTheOperator = "deployment Leases (named bloodraven-* or labelled bloodraven.shipstream.io/deployment-lease) " +
		"are written only by the bloodraven operator: take, renew and release them through the deployment API (/deploy/v1), " +
		"revoke them with the annotation bloodraven.shipstream.io/revoke-deployment-leases on the MysqlFailoverGroup, " +
		"and name your own Leases without the bloodraven- prefix and that label"
	MessageOperatorConfined = "the bloodraven operator writes only its deployment Leases (named bloodraven-*) and its " +
		"leader-election Lease; any other Lease (node heartbeats, other components' leader election) is refused to it, " +
		"so that a bug or a stolen operator token cannot touch them"
)

// Options are the parts of the policy that differ between installations.
// Every field but Namespaces is required.
type Options struct {
	// Name of the policy and of its binding.
	Name string
	// OperatorUsername is the operator's user name,
	// system:serviceaccount:<namespace>:<serviceaccount>.
	OperatorUsername string
	// LeaderElectionNamespace and LeaderElectionLease name the operator's
	// leader-election Lease (--leader-election-namespace,
	// --leader-election-id).
	LeaderElectionNamespace string
	LeaderElectionLease     string
	// Namespaces, when not empty, are the only namespaces the binding
	// covers, together with LeaderElectionNamespace (where the operator's
	// token may write Leases too). Empty: the whole cluster.
	Namespaces []string
}

// Policy returns the lease guard: a ValidatingAdmissionPolicy and the
// binding that enforces it (validationActions Deny), both named opts.Name.
// The policy's spec is ConstantSpec with opts' values prepended as
// variables, so that its validations are the same text everywhere.
func Policy(opts Options) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	spec := ConstantSpec()
	spec.Variables = append([]admissionregistrationv1.Variable{
		{Name: VariableOperatorUsername, Expression: literal(opts.OperatorUsername)},
		{Name: VariableLeaderElectionNamespace, Expression: literal(opts.LeaderElectionNamespace)},
		{Name: VariableLeaderElectionName, Expression: literal(opts.LeaderElectionLease)},
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
				Values:   BoundNamespaces(opts),
			}}},
		}
	}
	return policy, binding
}

// BoundNamespaces are the namespaces a namespaced binding covers: opts'
// Namespaces and the leader-election namespace, sorted, each once. Nil when
// opts.Namespaces is empty (the whole cluster).
func BoundNamespaces(opts Options) []string {
	if len(opts.Namespaces) == 0 {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, ns := range append(append([]string(nil), opts.Namespaces...), opts.LeaderElectionNamespace) {
		if !seen[ns] {
			seen[ns] = true
			out = append(out, ns)
		}
	}
	sort.Strings(out)
	return out
}

// ConstantSpec is the part of the policy's spec that is the same for every
// installation: all but the three leading variables Policy adds
// (VariableOperatorUsername, VariableLeaderElectionNamespace,
// VariableLeaderElectionName), which its variables and validations refer
// to. hack/leaseguard writes it to the chart.
func ConstantSpec() admissionregistrationv1.ValidatingAdmissionPolicySpec {
	labelled := func(o string) string {
		return o + " != null && has(" + o + ".metadata.labels) && '" + Label + "' in " + o + ".metadata.labels"
	}
	cleanup := make([]string, len(CleanupUsers))
	for i, u := range CleanupUsers {
		cleanup[i] = literal(u)
	}
	return admissionregistrationv1.ValidatingAdmissionPolicySpec{
		FailurePolicy: ptr.To(admissionregistrationv1.Fail),
		MatchConstraints: &admissionregistrationv1.MatchResources{
			// Equivalent: a Lease written through another version is
			// converted to v1 and judged the same.
			MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
			ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
					Rule: admissionregistrationv1.Rule{
						APIGroups:   []string{"coordination.k8s.io"},
						APIVersions: []string{"v1"},
						Resources:   []string{"leases"},
					},
				},
			}},
		},
		// Names cannot change, so object's (CREATE, UPDATE) and
		// oldObject's (DELETE, where object is null) are the same Lease's.
		Variables: []admissionregistrationv1.Variable{
			{Name: "name", Expression: "object != null ? object.metadata.name : oldObject.metadata.name"},
			{Name: "labelled", Expression: "(" + labelled("object") + ") || (" + labelled("oldObject") + ")"},
			{Name: "deploymentLease", Expression: "variables.name.startsWith('" + NamePrefix + "') || variables.labelled"},
			{Name: "byOperator", Expression: "request.userInfo.username == variables." + VariableOperatorUsername},
			{Name: "cleanup", Expression: "request.operation == 'DELETE' && request.userInfo.username in [" + strings.Join(cleanup, ", ") + "]"},
			{Name: "leaderElectionLease", Expression: "request.namespace == variables." + VariableLeaderElectionNamespace +
				" && variables.name == variables." + VariableLeaderElectionName},
		},
		Validations: []admissionregistrationv1.Validation{
			{
				Expression: "!variables.deploymentLease || variables.byOperator || variables.cleanup",
				Message:    MessageNotTheOperator,
				Reason:     ptr.To(metav1.StatusReasonForbidden),
			},
			{
				Expression: "!variables.byOperator || variables.name.startsWith('" + NamePrefix + "') || variables.leaderElectionLease",
				Message:    MessageOperatorConfined,
				Reason:     ptr.To(metav1.StatusReasonForbidden),
			},
		},
	}
}

// literal is s as a CEL string literal.
func literal(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
