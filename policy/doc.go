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
package policy
