// Package deployapi serves the deployment API, /deploy/v1, on the operator's
// TLS listener: a group-wide migration mutex and a renewable failover-hold for
// deploy pipelines, fenced by the group's topology generation.
//
// Every request passes, in this order: leadership (503 not_leader on
// followers), authentication (package authn: a projected ServiceAccount
// token checked by TokenReview for the configured audience, cached for 15 s
// or until the token's exp; 401 unauthenticated, or 503 unavailable with
// Retry-After when the review may not be sent now), the
// identity's fair share (fairshare.go: a rate, a number in flight and held
// lease GETs per ServiceAccount; 429 rate_limited with Retry-After, before
// the body is read or the API server is asked), the path,
// the body and ?namespace= parsed into a typed call (413,
// 400: member names exact, each once), authorization, then the lease
// decision of package policy. One function, wrap, runs that line for every
// route, and the request's log line is derived from the call and the
// result.
//
// Which namespace a request means (authz.go, docs/api.md "Resolved
// (tenants)"): a namespace counts only where a group named {group} exists;
// ?namespace= confines a request to one; the lease GET, PUT and DELETE are
// settled by the record that carries the caller's lease token and are
// authorized against that record's instance; two namespaces that count
// are the ambiguity 403. Answers name the namespace.
//
// Authorization is decided by uncached reads: a cache of MysqlDatabases,
// indexed by spec.groupRef.name, proposes the databases of the group that
// list the caller, and each is read by name from the API server until one
// confirms; then the group is read (it carries the fence). A steady request
// costs one database GET and one group GET, whatever the number of
// databases and groups in the cluster. A client removed from a database is
// refused by its next request; a database or client the cache has not seen
// yet is refused until it has (a brief false 403, never a false 200).
//
// Every answer under /deploy/ is JSON: the operator's TLS listener
// (server.TLSServer) hands those paths to the API as sent, and paths that
// name no route answer 404 not_found after authentication.
//
// The lease GET (watch.go) answers a lease's state as a renewal would,
// without renewing; with `Prefer: wait=N` (N <= 60) it holds the answer
// until the lease stops being the caller's (a new generation, a revocation,
// expiry, release, a re-grant with another token, a hold's mutex ending),
// the wait ends, or this replica stops leading (503). While it waits it
// reads nothing until the operator's informers report a change to the
// group or its Leases (changes.go), or its expiry passes; it then looks at
// the operator's caches, which costs the API server nothing, and a change
// they show is confirmed on fresh reads before it is answered. It never
// writes.
//
// Migration renewals may carry a phase (pre-ddl, ddl, done); the record
// keeps the furthest one reported, and a re-grant keeps it. A follower's
// 503 not_leader carries Connection: close.
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
//   - Every grant (a re-grant included) re-reads the group after its write
//     and withdraws what it wrote (423) if the topology generation moved past
//     the lease's or a transition appeared, and, for a failover-hold, if a
//     reservation appeared (policy.GrantOvertaken). A 201 or 200 therefore
//     names a lease that was at the current generation after it was written.
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
