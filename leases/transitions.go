package leases

import "time"

// Grant is what a new lease is made of.
type Grant struct {
	Group, GroupUID                 string
	Kind                            Kind
	OperationID, Instance, Identity string
	// Generation is the group's topologyGeneration at the grant.
	Generation int64
	TTLSeconds int64
	// HeldSince, for a re-grant of the migration mutex: the tenure the
	// re-grant continues. Zero for a create or take-over, which starts a
	// new tenure at the grant.
	HeldSince time.Time
	// Phase, for a re-grant of the migration mutex: the phase the
	// operation had reached. A re-grant never moves it back.
	Phase Phase
}

// NewGrant is the record of a grant (new, take-over or re-grant) at now: a
// fresh expiry and the hash of the new token.
func NewGrant(g Grant, tokenHash string, now time.Time) Record {
	held := g.HeldSince
	if held.IsZero() && g.Kind == KindMigration {
		held = now
	}
	return Record{
		Group: g.Group, GroupUID: g.GroupUID, Kind: g.Kind, OperationID: g.OperationID, Instance: g.Instance,
		Identity: g.Identity, State: StateActive, Generation: g.Generation, TTLSeconds: g.TTLSeconds,
		ExpiresAt: ExpiryAt(now, g.TTLSeconds), GrantedAt: now, RenewedAt: now, HeldSince: held, Phase: g.Phase, TokenHash: tokenHash,
	}
}

// Renewed is r renewed at now for ttl seconds.
func (r Record) Renewed(ttlSeconds int64, now time.Time) Record {
	r.TTLSeconds, r.RenewedAt, r.ExpiresAt = ttlSeconds, now, ExpiryAt(now, ttlSeconds)
	return r
}

// Advanced is r with its phase moved to p, if p is further along; a phase
// never moves back (a late or repeated renewal cannot undo the DDL
// boundary).
func (r Record) Advanced(p Phase) Record {
	if p != "" && !r.Phase.After(p) {
		r.Phase = p
	}
	return r
}

// Released is r released by its holder at now.
func (r Record) Released(now time.Time) Record {
	r.State, r.RenewedAt, r.EndedAt = StateReleased, now, now
	return r
}

// Reported is r with the outcome its client reported on release; the first
// report stands (a retried release cannot change it).
func (r Record) Reported(o Outcome) Record {
	if r.Outcome == "" {
		r.Outcome = o
	}
	return r
}

// Expired is r recorded as expired: its expiry passed, or (a failover-hold)
// its operation no longer holds the live migration mutex.
func (r Record) Expired() Record {
	r.State = StateExpired
	return r
}

// Revoked is r revoked at now for reason.
func (r Record) Revoked(reason string, now time.Time) Record {
	r.State, r.Reason, r.RevokedAt = StateRevoked, reason, now
	return r
}

// NewTombstone is the revocation record of operation: it outlives the
// operation's leases and answers 409 revoked until the group is deleted.
// revoked are the operation's records it ends; their token hashes are kept.
// It is written pending announcement (AnnouncePending).
func NewTombstone(group, groupUID, operationID, reason string, generation int64, revoked []Record, now time.Time) Record {
	t := Record{Group: group, GroupUID: groupUID, Kind: KindTombstone, OperationID: operationID, State: StateRevoked,
		Reason: reason, Generation: generation, GrantedAt: now, RenewedAt: now, ExpiresAt: now, RevokedAt: now,
		AnnouncePending: true}
	for _, r := range revoked {
		t.Instance, t.Identity = r.Instance, r.Identity
		if r.Kind == KindMigration {
			t.HeldSince = r.TenureStart() // the tenure it ended, for its DeployRun
		}
		if r.TokenHash != "" {
			t.RevokedTokenHashes = append(t.RevokedTokenHashes, r.TokenHash)
		}
	}
	return t
}

// Announced is the tombstone t once its revocation was announced.
func (t Record) Announced() Record {
	t.AnnouncePending = false
	return t
}

// HoldLive tells whether a failover-hold defers anything at now: the hold
// itself is live, and its operation holds the live migration mutex for the
// same instance, in the same tenure the hold was granted in. Once the
// operation's migration lease has expired, been released or revoked, or
// belongs to another operation, the hold is dead, and it stays dead when the
// operation takes the mutex again: a hold granted before the mutex's
// HeldSince belongs to an earlier tenure.
func HoldLive(hold, migration *Record, now time.Time) bool {
	return hold.Live(now) && migration.Live(now) &&
		migration.OperationID == hold.OperationID && migration.Instance == hold.Instance &&
		migration.GroupUID == hold.GroupUID &&
		(migration.HeldSince.IsZero() || !hold.GrantedAt.Before(migration.HeldSince))
}

// DeferralEnd is the earliest moment a live hold can stop deferring: the
// earlier of its own expiry and its migration mutex's.
func DeferralEnd(hold, migration *Record) time.Time {
	if migration != nil && migration.ExpiresAt.Before(hold.ExpiresAt) {
		return migration.ExpiresAt
	}
	return hold.ExpiresAt
}

// Effective is the subset of recs (one group's records, read together) that
// has effect at now for the group with groupUID: the live migration mutex
// and the holds live under HoldLive. Order is kept.
func Effective(recs []*Record, groupUID string, now time.Time) []*Record {
	var mig *Record
	for _, r := range recs {
		if r.Kind == KindMigration && r.BelongsTo(groupUID) && r.Live(now) {
			mig = r
		}
	}
	var out []*Record
	for _, r := range recs {
		switch {
		case !r.BelongsTo(groupUID):
		case r.Kind == KindMigration && r == mig:
			out = append(out, r)
		case r.Kind == KindFailoverHold && HoldLive(r, mig, now):
			out = append(out, r)
		}
	}
	return out
}
