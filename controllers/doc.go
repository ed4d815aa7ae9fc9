// Package controllers holds the MysqlFailoverGroup controller: it keeps the
// group's topology (active site, the topologyGeneration fence), takes the
// safety paths, runs the planned operations behind the admission gate, and
// keeps the stored deployment leases in line with their effect.
//
// Each reconcile runs four steps in a fixed order (docs/leases.md, "The
// reconcile"):
//
//  1. safety paths (safety.go): probe, policy.DecideSafety, act. They
//     take no lease input: completing or rolling back a transition,
//     bootstrap, fencing a returning old primary, emergency failover after
//     the detection budget, reasserting the primary, rejoining a fenced site;
//  2. lease bookkeeping (leases.go), as named steps decided by
//     policy.DecideBookkeeping: fence (revoke annotation, stale
//     generation), ends (expiries, leftovers of a deleted group of the same
//     name), announcements, and history (the verification gate, the
//     DeployRuns). A pass whose step 1 acted (a promotion among them)
//     requeues at once and leaves the history to that next pass, so the
//     urgent reconcile writes only what fences. A failure is logged,
//     counted and retried; it never returns early;
//  3. planned operations (admission.go, planned_failover.go,
//     ordered_update.go, restore_in_place.go): a removed or replaced request
//     gives up its reservation; policy.Admit defers an operation behind a
//     live hold; admitted, it persists status.reservation, re-reads the
//     holds, records every lapsed one as expired with a compare-and-swap,
//     and only then acts;
//  4. the observation (health, conditions) is written once, when it changed.
//
// Groups are reconciled by Workers at once (controller-runtime never runs
// one group twice at once), from a priority queue: a group whose primary is
// lost or moving, or that the prober (package topology/prober) woke, goes
// ahead of every routine reconcile. The reconcile's one probe is the
// prober's; an emergency promotion does not dial a site it just found dead
// (docs/failover.md, "Fleet").
//
// Every authoritative change of active site goes through promote: mark
// status.transition, act on the data plane, then write activeSite,
// topologyGeneration+1 and the operation's next phase in one status update,
// and revoke the leases it fenced.
//
// Guarantees: a started transition completes or is rolled back with its
// target fenced before any other site is made writable; never two writable
// sites by the operator's hand; a hold and an admission never both proceed;
// a reservation never outlives its request. Not guaranteed: timeliness under
// API-server outage — the controller acts only on what it could read and
// persist.
package controllers
