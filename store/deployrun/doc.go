// Package deployrun writes DeployRun objects: the history of granted
// migration operations (docs/gate.md, "Run history"; docs/gate.md, "Run
// history").
//
// A DeployRun is a projection of its operation's migration lease record
// (policy.RunStatus), which stays the one source of truth: the fence, the
// gate and every answer of the deployment API read the record, never the
// DeployRun.
//
// Guarantees:
//   - Every migration grant that answered 201 or 200 leaves a DeployRun
//     (named by Name, owned by the group): the deployment API writes it
//     once the grant is confirmed, and the group controller's bookkeeping
//     writes any that is missing for the group's current record.
//   - A run's end is recorded from the record before the record can be
//     replaced: the deployment API syncs the previous operation's run
//     before it takes a lapsed mutex over, and the group controller syncs
//     on every change of the record's state, phase or reported outcome.
//   - Writes carry the resourceVersion they were decided on; Sync is
//     idempotent, so the two writers never need to coordinate.
//
// It does not guarantee that every end is known: a run whose record was
// replaced while neither writer could write (the operator down, the API
// server refusing) is recorded with outcome and leaseEnd "unknown". A
// DeployRun is history for people, not authority: deleting one (only the
// operator may) changes no decision.
//
// Its tests live with its two writers (controllers and deployapi: the
// deployrun_test.go files there), because what they hold is when each
// writer syncs, against a real API server.
package deployrun
