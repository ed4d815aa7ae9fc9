package leases

import "time"

// Move is what the fence knows of the group's last change of active site,
// read fresh: the generation it wrote and when it was written
// (status.topologyGenerationTime; zero for a group whose last move predates
// that field).
type Move struct {
	Generation int64
	At         time.Time
}

// FencedByMove tells whether the migration mutex record r held authority
// when the topology moved: it was granted under an older generation than
// move's, for this incarnation of the group, and it is live now or was still
// live at move.At, however it has ended since (expired, or released at or
// after the move). A record that is already revoked, or that was released or
// had expired before the move, is not fenced by it. Without a recorded move
// time only a record live at now counts.
//
// Only the mutex carries an operation's authority: a failover-hold lives
// only while its mutex does, so a hold record never establishes that its
// operation was live at the move (a hold recorded expired because its mutex
// lapsed keeps its own later expiresAt). When the operation is fenced, its
// hold is revoked with it (Revoke).
//
// The generation rule is strict: a record at move's generation or newer is
// never fenced, so a caller whose view of the group is stale cannot revoke a
// lease granted after the move it did not see. A live record of an older
// generation is fenced whatever the clocks say, so a move time ahead of this
// replica's clock cannot let it escape.
func FencedByMove(r *Record, groupUID string, move Move, now time.Time) bool {
	if r == nil || !r.BelongsTo(groupUID) || r.Kind != KindMigration || r.Generation >= move.Generation {
		return false
	}
	if r.Live(now) {
		return true
	}
	if move.At.IsZero() {
		return false
	}
	switch r.State {
	case StateActive, StateExpired:
		return !move.At.After(r.ExpiresAt)
	case StateReleased:
		end := r.EndedAt
		if end.IsZero() {
			end = r.RenewedAt // released before EndedAt existed: RenewedAt is the release time
		}
		return !move.At.After(end)
	}
	return false
}

// ConfirmWindow is how long after its grant a migration record that was
// never renewed may still be a grant in flight: written, but not yet
// confirmed or withdrawn by the request that wrote it. The request reads the
// group again right after its write (milliseconds later); the window covers
// a slow API server.
const ConfirmWindow = 10 * time.Second

// AwaitingConfirmation tells whether the migration mutex record r may still
// be a grant in flight at now: active, never renewed since its grant (no
// later renewal time, no phase reported), and granted less than
// ConfirmWindow ago. Such a record may have been written
// by a grant that read the group before a move and landed after it: it never
// held authority, and its request withdraws it (deletes it, 423) once it
// reads the group again, so that its retry is granted at the new generation
// (docs/leases.md "only authority live at the move is fenced by it"). Whoever
// else would fence it on sight (the bookkeeping, another operation's grant)
// waits until the window ends instead; by then a withdrawn grant is gone,
// and a confirmed one is fenced as usual. Its own token never waits: a
// renewal or release that presents it is fenced at once (FencedByMove and
// the generation check), since a token is only handed out after the
// confirming read.
func AwaitingConfirmation(r *Record, now time.Time) bool {
	return r != nil && r.Kind == KindMigration && r.State == StateActive && !r.RenewedAt.After(r.GrantedAt) &&
		r.Phase == "" && now.Before(r.GrantedAt.Add(ConfirmWindow))
}

// Revocation is what revoking one operation writes: its tombstone first,
// then each of its records, revoked.
type Revocation struct {
	Tombstone Record
	// Next are the operation's records as they are to be written, in the
	// order given to Revoke.
	Next []Record
}

// RevocationInput is what Revoke needs, read fresh: the operation's records
// (its migration mutex and failover-hold; nil entries and records of other
// operations or group incarnations are ignored), the group's identity and its
// last move.
type RevocationInput struct {
	Group, GroupUID string
	OperationID     string
	Reason          string
	Move            Move
	Records         []*Record
	Now             time.Time
}

// Revoke decides what revoking an operation writes. It is the one rule every
// path that ends a lease asks (release, expiry, renewal, re-grant,
// bookkeeping):
//   - an operation with a record FencedByMove is revoked, for any reason;
//   - for every reason but topology_changed (the revoke annotation), an
//     operation with a live record is revoked too.
//
// When no record qualifies it returns false: nothing is to be written. The
// tombstone carries the move's generation and keeps the token hashes of the
// records it ends; every record of the operation not yet revoked is revoked.
func Revoke(in RevocationInput) (Revocation, bool) {
	var own []Record
	qualifies := false
	for _, r := range in.Records {
		if r == nil || r.OperationID != in.OperationID || !r.BelongsTo(in.GroupUID) || r.Kind == KindTombstone {
			continue
		}
		fenced := FencedByMove(r, in.GroupUID, in.Move, in.Now)
		qualifies = qualifies || fenced || (in.Reason != ReasonTopologyChanged && r.Live(in.Now))
		if r.State != StateRevoked {
			own = append(own, *r)
		}
	}
	if !qualifies {
		return Revocation{}, false
	}
	out := Revocation{Tombstone: NewTombstone(in.Group, in.GroupUID, in.OperationID, in.Reason, in.Move.Generation, own, in.Now)}
	for _, r := range own {
		next := r.Revoked(in.Reason, in.Now)
		next.RevokedAtGeneration = in.Move.Generation
		out.Next = append(out.Next, next)
	}
	return out, true
}
