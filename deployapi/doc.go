// Package deployapi serves the deployment API, /deploy/v1, on the operator's
// TLS listener: a group-wide migration mutex and a renewable failover-hold for
// deploy pipelines, fenced by the group's topology generation.
//
// Every request passes, in this order: leadership (503 not_leader on
// followers), authentication (a projected ServiceAccount token checked by
// TokenReview for the configured audience, which the review must name in
// status.audiences; successful reviews cached by token hash for 15 s or
// until the token's own exp, whichever is first, at most 1,024 entries),
// body size and shape (413, 400),
// authorization (fresh, uncached reads of MysqlDatabases and of the group on
// every request), then the lease decision of package policy.
//
// Guarantees:
//   - Mutual exclusion comes from the API server: grants and renewals are
//     Creates or resourceVersion-preconditioned Updates of Lease objects
//     (package leasestore), so two replicas, or a replica and its restarted
//     self, can never both grant the mutex.
//   - A failover-hold lives only while its operation holds the live mutex:
//     once the mutex expires, is released or revoked, the hold's renewal
//     answers 404 and it is not listed. Releasing the mutex releases the
//     operation's hold first.
//   - Every hold grant (a re-grant included) re-reads the group after its
//     write and withdraws the hold (423) if a reservation appeared.
//   - A stale-generation revocation re-reads and re-checks the record; a
//     lease at the current generation is never revoked by a cache lag.
//   - A lease counts only for the group incarnation (UID) it was granted
//     under. A group being deleted takes no grant (403 forbidden, as if it
//     were gone) and renews nothing (404 not_found).
//   - The fence is read fresh on every request: a grant or renewal that starts
//     after the API server acknowledged a generation bump never succeeds.
//   - Tokens are returned once, in the grant's body; only their SHA-256 hash
//     is stored. No token, hash or Authorization header is logged or put in a
//     metric label. Every error body is the contract's JSON; internal error
//     text goes to the log, never to the client.
//   - 423 is never a renewal: nothing is written when it is answered.
//
// Not guaranteed: that a pipeline stops at its deadline. A TTL is not an
// exactly-once guarantee for DDL; the client package implements the rules.
//
// GET answers 200 during an unconfirmed transition, with stable=false and
// unstableReason TopologyTransition, rather than 423: it is an observation and
// grants nothing. API-server throttling (429) and unavailability answer 503
// {"error":"unavailable"} with Retry-After; these are outside the contract's
// table, which does not cover a failing API server.
package deployapi
