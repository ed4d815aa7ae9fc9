// Package webhook holds the validating admission webhooks, served on the
// operator's TLS listener beside /deploy/v1.
//
// They guard what a careless `kubectl edit` or script could break:
//
//   - The status. On mysqlfailovergroups/status, only the operator's own
//     identity may change anything: the fence, the active site, the
//     transition, the reservation, phases, health, conditions, and any status
//     field added later (every field is compared; a difference no field
//     accounts for is refused on status itself). The operator acts on its own
//     status, so a hand-written field would be an instruction nobody
//     authorized. Anyone else is refused on each changed field and told to
//     use the revoke annotation or spec.plannedFailover instead; an update
//     that changes nothing is accepted from anyone.
//   - The fence. Even the operator changes status.topologyGeneration and
//     status.activeSite only by the rules of the fence: the generation never
//     decreases and moves by exactly one, and only together with a change of
//     active site to one of spec.sites — or, for a promotion that keeps the
//     site (restore in place), the transition the operator announced in
//     status.transition beforehand. This rule is not a webhook but the fence
//     guard (FenceGuard), a ValidatingAdmissionPolicy the API server
//     evaluates itself.
//   - The group spec: a planned failover or restore-in-place target must be
//     one of spec.sites, site names are unique, the active site cannot be
//     removed. The revoke annotation is accepted with any value.
//   - The client list: deploymentClients entries need both fields, valid
//     names, at most one per namespace; groupRef.name is a valid name.
//
// Each rule is a function returning a field.ErrorList, table-tested without a
// server; denials are apierrors.NewInvalid, naming the field and index.
// The webhook configuration (config/webhook) is generated from the markers
// here: failurePolicy Fail, sideEffects None, 5 s timeouts.
//
// The operator's own writes never wait on these webhooks: whoever installs
// them (the chart, the playground, the tests) adds the match condition
// NotTheOperator to each (ExemptTheOperator), which the API server evaluates
// before it would call one, so the operator's status, DeployRun and
// bookkeeping writes succeed while a replica lost with its node still sits
// in the webhooks' Service, and a failover is not delayed. Everyone else's
// requests are sent: people's edits stay guarded and fail closed (refused
// after the 5 s timeout) while no replica answers; so do the garbage
// collector's and the namespace controller's deletions of DeployRuns, which
// wait until a replica serves again. The handlers still accept the
// operator's requests as before, should a configuration without the
// condition send them (they need none of them), and the fence's rules for
// the operator live in the fence guard, not here.
// TestTheOperatorsWritesNeverWaitOnItsWebhooks holds this through the API
// server with the webhooks black-holed.
//
// Not guaranteed: the API server validates the CRD schema before calling
// these webhooks, so for errors the schema also catches (a duplicate
// namespace, a missing field) the user sees the schema's message; the webhook
// check stands behind it. Nothing here stops a user with RBAC on
// MysqlDatabases from granting deployment coordination: that authority is
// the design. Whoever authenticates as the operator's identity writes status
// within the fence rules; who may obtain that ServiceAccount's tokens is
// RBAC's to decide. The operator's identity is exempt from the webhooks: a
// spec, client-list or DeployRun write made with it is not checked, and the
// fence's rules hold it only where the fence guard is installed (the chart
// renders it with the webhooks; the playground installs it).
package webhook
