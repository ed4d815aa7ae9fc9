// Package leaseguard builds the ValidatingAdmissionPolicy (and its binding)
// that makes deployment Leases the operator's alone (docs/leases.md, "Lease
// objects are the operator's alone"). The Helm chart renders the same policy
// (charts/bloodraven/templates/leaseguard.yaml, from the constant part that
// hack/leaseguard writes to charts/bloodraven/files/lease-guard.yaml) and the
// playground installs it from Policy; a chart test holds the two equal.
//
// A Lease is a deployment Lease when its name starts with "bloodraven-" or it
// carries the label bloodraven.shipstream.io/deployment-lease (with any
// value), before or after the request. With the policy and its binding in
// place, the API server guarantees:
//
//   - Only the operator's user name creates, updates or deletes a deployment
//     Lease. The garbage collector and the namespace controller may still
//     delete one (owner references and namespace deletion keep working):
//     system:serviceaccount:kube-system:generic-garbage-collector,
//     system:serviceaccount:kube-system:namespace-controller, and
//     system:kube-controller-manager for clusters that run its controllers
//     without per-controller credentials. Cluster administrators are refused
//     like everybody else.
//   - The operator's user name writes no other Lease than one named
//     "bloodraven-*" and its leader-election Lease (that namespace and name):
//     a bug or a stolen operator token cannot touch node heartbeats or other
//     components' leader election. The label alone does not make a Lease the
//     operator's to write: it would let a stolen token create any Lease that
//     does not exist yet (a node's heartbeat, a component's leader election)
//     by labelling it.
//   - A request the policy cannot evaluate is refused (failurePolicy Fail).
//
// It does not guarantee:
//
//   - Anything on a cluster where the policy or its binding is missing,
//     disabled, or was deleted by someone allowed to: the operator then
//     relies on the record MAC it checks on every Lease it reads (a record
//     whose MAC does not verify holds and defers nothing), and reports the
//     missing policy (a metric and a start-up warning).
//   - That a deployment Lease is never deleted by someone else: the garbage
//     collector and the namespace controller delete them, and any user who
//     can impersonate those user names can too. Deleting the owning
//     MysqlFailoverGroup deletes its Leases, tombstones included.
//   - Protection outside the bound namespaces: with Options.Namespaces the
//     binding covers only those and the leader-election namespace, so
//     releases watching disjoint namespaces do not lock each other out.
//   - Protection of reads: who may get, list or watch Leases is RBAC's.
//   - Instant effect: the API server enforces a new policy (or a change)
//     within a moment of its creation, not at once.
package leaseguard
