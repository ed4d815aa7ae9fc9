// Package store holds what the deployment side keeps in the Kubernetes API
// server: the optimistic-retry loop its writers use (Retry; the
// controllers' admission uses it too), and one sub-package per kind of
// object (the controllers write the groups' and databases' status
// themselves):
//
//   - leasestore: deployment Leases and tombstones (the record MAC, the
//     caches, the label scheme);
//   - gate: the schema-verification gate on a MysqlDatabase;
//   - deployrun: the DeployRun history of each operation.
//
// Mutual exclusion comes from the API server's resourceVersion
// preconditions: Retry runs an attempt again, from fresh reads, when it
// lost a race (a Conflict or AlreadyExists) or decided on a cached read it
// must confirm (ErrStale), at most MaxAttempts times, then returns
// ErrContended. Nothing here holds a lock in one process.
//
// What is decided is not here: decisions are policy's (pure functions);
// the store only reads, writes and retries.
package store
