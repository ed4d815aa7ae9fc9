// Package policy holds Bloodraven's decisions as pure functions: given an
// input gathered by I/O code (and the time, passed in), return a decision.
// Nothing here reads a clock, a client or the environment, so every rule is
// table-tested without a server.
//
// Guarantees: the functions are deterministic and total (every input has an
// answer, no panics). Not guaranteed: that the input is fresh — callers gather
// it, and the fence (status.topologyGeneration with resourceVersion
// preconditions in the API server) is what makes a stale decision harmless.
//
// The deferral budget (spec.maxDeferralSeconds; docs/failover.md, "Planned
// operations and the hold") is decided here too: DecideDeferralBudget (when
// it warns and when it is spent, from a request's first deferral), Admit's
// BudgetSpent (live holds no longer defer; they are returned to be revoked)
// and DecideGrant's GroupView.DeferralBudgetSpent (409
// deferral_budget_exhausted, after 403 and before 423). The controller and
// the deployment API feed them; no emergency path reads them.
//
// CutOver is the group's side of an online schema change's cut-over
// (docs/online-schema-change.md): no planned operation due within the
// margin, none in flight or reserving the group, the group stable. The
// deployment API's observation and `kubectl bloodraven status` show it;
// the run's side (its generation, its leases' deadline) is decided in the
// client module (deployclient.DecideCutOver), which cannot import this one.
package policy
