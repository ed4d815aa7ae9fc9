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
// Every record the store writes carries a MAC (RecordKey: HMAC-SHA256 of
// the Lease's namespace, name and record under the operator's key, kept in
// a Secret only the operator reads). A record read that does not verify
// stands for an object that exists but holds nothing: it belongs to no
// group and no operation, so it holds no mutex, defers nothing, is never
// listed, renewed, re-granted or revived, and a grant overwrites it with
// the resourceVersion it was read at. It is reported once per object
// version (Store.OnUnverified). A record with no MAC on a Lease created
// before the key is a record of the previous version: honoured, with its
// expiry clamped to the key's creation plus the longest ttl.
//
// Guarantees: every write carries the resourceVersion it decided on;
// store.Retry is the one retry loop (at most store.MaxAttempts attempts, fresh
// reads after the first); Revoke decides nothing: it re-reads the group and
// the operation's records from the API server and writes what leases.Revoke
// decides on them, so a revocation only tombstones leases of a generation
// older than a fresh read of the group's. Not guaranteed: that a cached
// read is current (callers confirm a refusal with a fresh read, and a stale
// success costs a Conflict); that a deletion, or a replay of an earlier
// sealed record of the same Lease, is noticed (the lease guard policy,
// package leaseguard, refuses both at admission).
package leasestore
