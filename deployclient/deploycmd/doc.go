// Package deploycmd is `bloodraven deploy`, the pipeline's command line, in
// the operator's binary:
//
//	bloodraven deploy run --group G --instance I [flags] -- COMMAND [ARGS]
//	bloodraven deploy status --group G [-o json]
//	bloodraven deploy mark-ddl
//
// `run` holds the migration mutex and the failover-hold (package
// deployclient) around COMMAND, like `consul lock`, with the fence consul
// lacks. COMMAND gets BLOODRAVEN_GROUP, BLOODRAVEN_INSTANCE,
// BLOODRAVEN_OPERATION_ID, BLOODRAVEN_TOPOLOGY_GENERATION and
// BLOODRAVEN_DDL_MARKER, a file it creates (or `bloodraven deploy mark-ddl`
// creates) before its first schema change.
//
// Guarantees:
//   - COMMAND starts only once both leases are held, in its own process
//     group, with SIGKILL as its parent-death signal: a run killed outright
//     takes COMMAND with it.
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
//     generation, to fence its own writes); at or after it, the run exits 5
//     and says that a person must verify the schema.
//   - The outcome is recorded (stderr, and --outcome-file when given,
//     synced) before the migration mutex is released; if the file cannot be
//     written the mutex is left to lapse at its ttl.
//   - Exit codes are distinct: 0 success, 1 COMMAND failed, 2 usage,
//     3 could not acquire, 4 lost before the DDL boundary, 5 lost at or
//     after it, 6 lost before it and --on-abort failed, 7 the outcome could
//     not be written (the mutex is left to lapse).
//   - Nothing secret is printed: not the bearer token, not a lease token.
//
// COMMAND runs in its own process group, so it should not read from a
// terminal (a background group that does is stopped by SIGTTIN); its stdin,
// stdout and stderr are the run's.
//
// Not guaranteed: that COMMAND wrote nothing after the loss. Signals take
// time and a TTL is not an exactly-once guarantee; the DDL marker is read
// after COMMAND has stopped, so a marker written at the last moment counts
// as "after the boundary", the cautious side.
package deploycmd
