package policy

import (
	"sort"
	"time"

	"github.com/shipstream/bloodraven/leases"
)

// BookkeepingInput is what lease bookkeeping needs: the group's identity and
// fence, whether the revoke annotation is present, and its lease records,
// read fresh.
type BookkeepingInput struct {
	Now        time.Time
	GroupUID   string
	Generation int64
	// MovedAt is when Generation was written (status.topologyGenerationTime).
	MovedAt   time.Time
	RevokeAll bool
	Leases    []*leases.Record
}

// Bookkeeping is what the controller writes so the stored leases match
// their effect. None of it gates a safety path: the fence is the group's
// generation, checked by the deployment API on every request, so a
// revocation that fails to be written is late, never unsafe.
type Bookkeeping struct {
	// Revoke lists operations (sorted) whose live leases end with Reason.
	Revoke []string
	Reason string
	// Expire lists active records that have no effect any more: past their
	// expiry, or failover-holds whose operation no longer holds the live
	// migration mutex. Operations in Revoke are not listed.
	Expire []*leases.Record
	// Foreign lists records of a deleted group of the same name.
	Foreign []*leases.Record
	// RecheckAt, when set, is when a record the move fences stops
	// AwaitingConfirmation: until then it may be a grant in flight that
	// landed after the move it did not see, which its own request
	// withdraws; it is revoked on a pass at or after RecheckAt if it is
	// still there.
	RecheckAt time.Time
	// Delete lists failover-holds that ended (released, expired, revoked)
	// longer ago than their ttl: nothing can still ask for them, and every
	// answer about them stays the same without them (404 for an ended hold
	// and for an unknown one; 409 from the operation's tombstone, which is
	// kept). The mutex, one per group, and tombstones are never deleted.
	Delete []*leases.Record
}

// HoldForgotten tells whether an ended failover-hold may be deleted: it is
// not active, and another ttl has passed since it last could have held (the
// latest of its expiry, release and revocation): the margin covers a
// client's clock and a request in flight.
func HoldForgotten(r *leases.Record, now time.Time) bool {
	if r == nil || r.Kind != leases.KindFailoverHold || r.State == leases.StateActive {
		return false
	}
	end := r.ExpiresAt
	for _, t := range []time.Time{r.EndedAt, r.RevokedAt} {
		if t.After(end) {
			end = t
		}
	}
	return now.Sub(end) > time.Duration(r.TTLSeconds)*time.Second
}

// DecideBookkeeping picks revocations, expiries and leftovers. Every
// operation with a record that held authority when the topology moved
// (leases.FencedByMove: live at the move, however it ended since) is revoked,
// topology_changed; with the revoke annotation, every operation with a live
// lease too, and all of them operator_revoked. A fenced record that may
// still be a grant in flight (leases.AwaitingConfirmation) is left to its
// request, and decided again at RecheckAt.
func DecideBookkeeping(in BookkeepingInput) Bookkeeping {
	out := Bookkeeping{Reason: leases.ReasonTopologyChanged}
	if in.RevokeAll {
		out.Reason = leases.ReasonOperatorRevoked
	}
	revoke, pending := map[string]bool{}, map[string]bool{}
	for _, r := range in.Leases {
		switch {
		case !r.BelongsTo(in.GroupUID):
			out.Foreign = append(out.Foreign, r)
		case in.RevokeAll && r.Live(in.Now):
			revoke[r.OperationID] = true
		case leases.FencedByMove(r, in.GroupUID, leases.Move{Generation: in.Generation, At: in.MovedAt}, in.Now):
			if leases.AwaitingConfirmation(r, in.Now) {
				// Maybe a grant that landed after the move: its request
				// withdraws it. Decide again once the window ends.
				if end := r.GrantedAt.Add(leases.ConfirmWindow); out.RecheckAt.IsZero() || end.Before(out.RecheckAt) {
					out.RecheckAt = end
				}
				pending[r.OperationID] = true
				continue
			}
			revoke[r.OperationID] = true
		}
	}
	for op := range revoke {
		out.Revoke = append(out.Revoke, op)
	}
	sort.Strings(out.Revoke)
	effective := map[*leases.Record]bool{}
	for _, r := range leases.Effective(in.Leases, in.GroupUID, in.Now) {
		effective[r] = true
	}
	for _, r := range in.Leases {
		if r.State == leases.StateActive && r.BelongsTo(in.GroupUID) && !effective[r] && !revoke[r.OperationID] && !pending[r.OperationID] {
			out.Expire = append(out.Expire, r)
		}
		if r.BelongsTo(in.GroupUID) && !revoke[r.OperationID] && HoldForgotten(r, in.Now) {
			out.Delete = append(out.Delete, r)
		}
	}
	return out
}

// LateGrants lists (sorted, once each) the operations of recs with a live
// lease granted at or before removedAt, when the revoke annotation was removed:
// grants whose group read came before the annotation and whose write came
// after the revocation's list of the leases, which the annotation was meant
// to end (every grant decided while it stood answered 423).
func LateGrants(recs []*leases.Record, groupUID string, removedAt, now time.Time) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range recs {
		if r.BelongsTo(groupUID) && r.Live(now) && !r.GrantedAt.After(removedAt) && !seen[r.OperationID] {
			seen[r.OperationID] = true
			out = append(out, r.OperationID)
		}
	}
	sort.Strings(out)
	return out
}
