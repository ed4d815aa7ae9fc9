// Package leases is the deployment lease as plain data: the Record, its
// tokens, the names of the Lease objects that hold it, and its state
// transitions (NewGrant, Renewed, Released, Expired, Revoked, NewTombstone).
// It imports no client: package leasestore is where records meet the API
// server, and package policy decides which transition applies.
//
// Rules stated here, used by every reader:
//   - a record is live while it is active and now <= expiresAt (Live);
//   - a failover-hold is live only while its operation holds the live
//     migration mutex for the same instance (HoldLive); once that mutex
//     expires, is released or revoked, the hold defers nothing;
//   - a record counts only for the group incarnation (UID) it was granted
//     under (BelongsTo);
//   - a hold belongs to its mutex's tenure: one granted before the mutex's
//     HeldSince (a create or take-over) defers nothing (HoldLive), and a
//     deferral ends at the earlier of the hold's and the mutex's expiry
//     (DeferralEnd);
//   - an operation with a record of an older generation that was live when
//     the topology moved (FencedByMove: live at the move time, however it
//     ended since) is revoked; Revoke is the one rule saying what a
//     revocation writes, asked by every path that ends a lease.
//
// Guarantees: a token is never stored, only its hash, compared in constant
// time; transitions return new values and never edit a record in place.
// Not guaranteed: expiry is judged by the caller's clock (the operator's); a
// TTL is not an exactly-once guarantee for the work it covers.
package leases
