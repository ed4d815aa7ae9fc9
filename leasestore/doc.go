// Package leasestore stores deployment leases as coordination.k8s.io/v1
// Lease objects in the group's namespace. It is the only code that reads or
// writes them; what a record becomes is decided by the pure transitions of
// package leases.
//
// Layout (one object per lease, all owned by the MysqlFailoverGroup):
//   - the migration mutex of group G is the single Lease named
//     leases.MigrationName(G); whichever operation holds the mutex is
//     recorded in it, so mutual exclusion comes from the API server: the
//     first grant is a Create (AlreadyExists for the loser), every later
//     change an Update that carries the resourceVersion it decided on
//     (Conflict for the loser);
//   - the failover-hold of operation O is the Lease leases.HoldName(G, O);
//   - a revoked operation leaves the tombstone leases.TombstoneName(G, O),
//     created before the lease itself is marked revoked, so a crash between
//     the two steps never loses the revocation. Tombstones carry token
//     hashes, the revocation reason and generation; they are deleted only
//     with the group.
//
// The record is JSON in the annotation RecordAnnotation. The Lease spec
// mirrors it for kubectl users: holderIdentity is the operation ID and
// leaseDurationSeconds a whole-second projection of the ttl, at least 1; the
// record's expiresAt and state are authoritative. Every record names its
// group's UID, so a group re-created under the same name honours none of
// the old records.
//
// A tombstone is written pending announcement (kind label
// KindPendingTombstone, so it is cached and watched); the controller
// announces it once with Announce, a compare-and-swap that relabels it
// "tombstone", which drops it from the cache.
//
// Guarantees: every write carries the resourceVersion it decided on;
// Optimistic is the one retry loop (at most MaxAttempts attempts, fresh
// reads after the first); Revoke decides nothing: it re-reads the group and
// the operation's records from the API server and writes what leases.Revoke
// decides on them, so a revocation only tombstones leases of a generation
// older than a fresh read of the group's. Not guaranteed: that a cached read is current — callers
// confirm a refusal with a fresh read, and a stale success costs a Conflict.
package leasestore
