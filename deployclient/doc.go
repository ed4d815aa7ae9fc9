// Package deployclient is the pipeline side of the deployment API
// (/deploy/v1): a Client for its five requests and a Session that holds a
// group's migration mutex and the operation's failover-hold around a piece
// of work, the way `consul lock` holds a lock around a child process, plus
// the fencing consul lacks. It is its own module and imports only the
// standard library.
//
// A Session:
//   - runs one runner at a time: an operation id that is live under another
//     runner (the observation lists it), or may be (a grant attempt is
//     answered 200, a re-grant), is not acquired (OperationLiveError),
//     unless SessionConfig.TakeOver, which renews the lease and waits 120 s
//     on the session's clock before Acquire returns. A 200 that answers a
//     retry of an unanswered attempt counts too: the lost attempt may have
//     re-granted another runner's operation, and no answer tells that from
//     the session's own lost grant (OperationLiveError.AfterLostAnswer).
//     Only a 201 proves that nothing was live;
//   - keeps one lease GET (long poll) open per lease besides its renewals,
//     so a revocation, a move, a re-grant or a release by another token is
//     learned within about a second; against an older operator (405) it
//     says so and relies on the heartbeat;
//   - reports the DDL boundary with a confirmed renewal (MarkDDL, phase
//     ddl) and decides success only by a renewal after the work (Confirm,
//     phase done on success) answered 200 at the grant's generation;
//   - drops its idle connections on 503 not_leader, so a retry behind a
//     Service can reach the leader;
//   - takes the migration lease, then the failover-hold, for one operation
//     id and instance; while another operation holds the mutex it waits
//     until the holder's expiresAt (with jitter, within SessionConfig.Wait);
//   - renews both every ttl/3 and keeps, per lease, the last confirmed
//     deadline: the moment the last successful request was sent plus the
//     ttl the server answered, on the client's monotonic clock. The server's
//     expiresAt is never used for it, so a server clock running ahead cannot
//     stretch it;
//   - treats 423 unstable (and 503, 429, 401, a transport error) as "not
//     renewed": it keeps asking inside the confirmed deadline and declares
//     the lease lost when the deadline passes, or SessionConfig.Margin
//     before it, so that a caller can have its work stopped by the
//     deadline; Held says whether both leases are held at this instant;
//   - declares the lease lost at once on 404 not_found, 409 revoked (with
//     its reason), 403 token_mismatch or forbidden, and on a renewal whose
//     topologyGeneration differs from the grant's. The loss is reported
//     once: Lost() closes, Err() returns the *LostError and Context() is
//     canceled with it as cause;
//   - pins the group's namespace: Config.Namespace, or else the first
//     answer that names one (the observation Acquire reads first, or a
//     grant's or renewal's answer). Every later request of the session
//     names it (?namespace=<ns>: the server then considers only that
//     namespace, so another tenant's group of the same name can neither
//     capture nor deny the operation), the watch, MarkDDL, Confirm and the
//     release included. An answer that names another namespace is a
//     *NamespaceError: a loss (CauseNamespaceMismatch) once the leases are
//     held, a permanent AcquireError before; never a reason to re-pin;
//   - reads the projected token file for every request, so rotation needs
//     no restart, and verifies the server's certificate against a CA file
//     and the server's hostname;
//   - serializes grants (a retry after a lost answer re-grants the operation
//     and swaps the token) with renewals of the same lease, and never POSTs
//     to get past a revocation: 409 revoked is final for the operation
//     (AcquireError.Permanent, like 403 forbidden and 409
//     verification_required);
//   - releases the hold first, and the mutex only after a caller-supplied
//     step has recorded the operation's outcome (Release);
//   - leaves nothing held when Acquire fails: a granted lease is released,
//     and a grant whose answer was lost is re-granted once to learn its
//     token and released; except a migration lease that is or may be
//     another runner's (seen live, or re-granted with 200), which is renewed
//     to 120 s and left to lapse, so that no third operation starts beside a
//     command that may still run;
//   - judges an online schema change's cut-over (DecideCutOver, pure:
//     the grant's generation, the observation's cutOver block, any
//     deferral budget and the leases' earliest confirmed deadline against
//     the tool's budget); WaitCutOver waits until it is allowed, returns
//     the loss as soon as a lease is lost, and marks nothing: the caller
//     marks the boundary (MarkDDL) at once (docs/online-schema-change.md).
//
// Every time read and timer goes through SessionConfig.Clock (default
// RealClock).
//
// Not guaranteed: that the work stops at the deadline. The session reports
// the loss; stopping the work is the caller's (the CLI in package
// deploycmd kills its child). A TTL is not an exactly-once guarantee for
// DDL: after a loss at or after the DDL boundary a person must verify the
// schema, and the pipeline must never reconnect to a new primary to finish.
// The observation (Client.Observe) grants nothing.
//
// Secrets: the bearer token and lease tokens are never put in an error, a
// progress line or a log.
package deployclient
