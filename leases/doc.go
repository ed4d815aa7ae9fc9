// Package leases stores deployment leases as coordination.k8s.io/v1 Lease
// objects in the group's namespace and revokes them.
//
// Layout (one object per lease, all owned by the MysqlFailoverGroup):
//   - the migration mutex of group G is the single Lease named
//     MigrationName(G); whichever operation holds the mutex is recorded in it,
//     so mutual exclusion comes from the API server: the first grant is a
//     Create (AlreadyExists for the loser), every later change an Update that
//     carries the resourceVersion it decided on (Conflict for the loser);
//   - the failover-hold of operation O is the Lease HoldName(G, O);
//   - a revoked operation leaves the tombstone TombstoneName(G, O), created
//     before the lease itself is marked revoked, so a crash between the two
//     steps never loses the revocation. Tombstones carry token hashes, the
//     revocation reason and generation; they are deleted only with the group.
//
// The record (operation, instance, caller identity, kind, state, reason, grant
// generation, exact expiresAt, ttl, SHA-256 token hash) is JSON in the
// annotation RecordAnnotation. The Lease spec mirrors it for kubectl users:
// holderIdentity is the operation ID and leaseDurationSeconds a whole-second
// projection of the ttl, at least 1; the record's expiresAt and state are
// authoritative.
//
// Guarantees: a token is never stored, only its hash, compared in constant
// time. Not guaranteed: expiry is judged by the caller's clock (the
// operator's); a TTL is not an exactly-once guarantee for the work it covers.
package leases
