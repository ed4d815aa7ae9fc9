// Package deploycmd is the pipeline's command line: the binary
// bloodraven-deploy (cmd/bloodraven-deploy), and `bloodraven deploy` in the
// operator's binary. Its command tree is cobra's (with shell completion):
//
//	bloodraven-deploy run --group G --instance I [--namespace NS] [flags] -- COMMAND [ARGS]
//	bloodraven-deploy status --group G [--namespace NS] [-o json]
//	bloodraven-deploy mark-ddl
//	bloodraven-deploy completion bash|zsh|fish|powershell
//
// `run` holds the migration mutex and the failover-hold (package
// deployclient) around COMMAND, like `consul lock`, with the fence consul
// lacks. COMMAND gets BLOODRAVEN_GROUP, BLOODRAVEN_INSTANCE,
// BLOODRAVEN_OPERATION_ID, BLOODRAVEN_TOPOLOGY_GENERATION and
// BLOODRAVEN_DDL_MARKER and BLOODRAVEN_DEPLOY_CONTROL. Before its first
// schema change it runs `mark-ddl`, which writes the marker file and returns
// only once the run confirmed phase ddl with the operator (through the
// run's control socket, a Unix socket in its private directory).
//
// Guarantees:
//   - COMMAND starts only once both leases are held, and never while
//     another runner of the same operation id may still run (exit 3, or
//     --take-over: 120 s later; a grant answered 200 after a lost answer
//     counts as another runner's, since nothing tells it from this run's
//     own). It runs in its own process group. On Linux it is started
//     through a supervisor (this binary re-executed with a hidden first
//     argument, see proc_linux.go): a child subreaper that kills
//     COMMAND's group and every process that left it when the run dies, so
//     a run killed outright (SIGKILL) leaves nothing COMMAND started
//     running; it also kills what left the group when the run exits. On
//     macOS a run killed outright leaves COMMAND running (a documented best
//     effort).
//   - The run succeeds (exit 0) only if a renewal sent after COMMAND exited
//     (phase done) was confirmed at the grant's generation; otherwise the
//     DDL boundary decides between 4 and 5.
//   - When either lease is lost (revoked, expired, token refused, a new
//     topology generation, or no renewal confirmed --grace before the
//     deadline) COMMAND's process group gets SIGTERM, then SIGKILL after
//     --grace, and no later than 250 ms before the lease's confirmed
//     deadline: it is gone by then. --grace is at most ttl/3 (default
//     ttl/3, at most 10 s).
//   - Whatever COMMAND left running in its group is stopped the same way
//     before any lease is released.
//     Then the hold is released; before the DDL boundary the --on-abort
//     command runs (it gets BLOODRAVEN_LOST_CAUSE and the grant's
//     generation, to fence its own writes), supervised like COMMAND, in its
//     own process group, for at most --on-abort-timeout (default 5m): then
//     its group gets SIGTERM, SIGKILL --grace later, and the run exits 6;
//     at or after the boundary, the run exits 5 and says that a person must
//     verify the schema.
//   - The outcome is recorded (stderr, and --outcome-file when given,
//     synced) before the migration mutex is released; if the file cannot be
//     written the mutex is left to lapse at its ttl.
//   - Exit codes are distinct: 0 success, 1 COMMAND failed, 2 usage,
//     3 could not acquire now (retry), 4 lost before the DDL boundary, 5
//     lost at or after it, 6 lost before it and --on-abort failed (or ran
//     past --on-abort-timeout), 7 the
//     outcome could not be written (the mutex is left to lapse), 8 refused
//     for good (403 forbidden, 409 revoked, 409 verification_required).
//   - The group's namespace is pinned for the run: --namespace (env
//     BLOODRAVEN_DEPLOY_NAMESPACE), or else the namespace the first answer
//     names. Every later request names it (the renewals, the watch,
//     mark-ddl's renewal, the confirming renewal and the releases); an
//     answer that names another namespace is a loss (4 or 5), or exit 8
//     before COMMAND started. Without --namespace, a 403 forbidden on the
//     first request (which is what the server answers when the group's name
//     is authorized in more than one namespace) exits 8 and says that
//     --namespace settles it.
//   - Nothing secret is printed: not the bearer token, not a lease token.
//   - Online schema changes (osc.go, docs/online-schema-change.md): the
//     boundary is the tool's cut-over. `cut-over` (its cut-over hook)
//     returns 0 only once cutting over is safe (deployclient.DecideCutOver)
//     and the boundary is confirmed; 4 when authority is lost while it
//     waits, 1 at its --timeout, 2 outside a run. With
//     --postpone-flag-file the run creates gh-ost's flag file before
//     COMMAND, and once COMMAND ran `postponing` removes it only while a
//     cut-over is safe (the boundary confirmed first) and puts it back when
//     it is not. A loss before the boundary says its stage (pre-ddl or
//     awaiting-cut-over) in the outcome and to --on-abort.
//
// COMMAND runs in its own process group, so it should not read from a
// terminal (a background group that does is stopped by SIGTTIN); its stdin,
// stdout and stderr are the run's.
//
// Not guaranteed: that COMMAND wrote nothing after the loss. Signals take
// time and a TTL is not an exactly-once guarantee; the DDL marker is read
// after COMMAND has stopped, so a marker written at the last moment counts
// as "after the boundary", the cautious side.
//
// run.go's tests against a real operator (a real API server, TokenReviews
// and the deployment API) are in e2e/clienttest/cli: this module imports
// only the standard library and cobra, so they cannot live here. The tests
// here use a fake API over TLS and real child processes.
package deploycmd
