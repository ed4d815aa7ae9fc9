package policy

import (
	"time"

	"github.com/shipstream/bloodraven/leases"
)

// LeaseOutcome is what the deployment API does with a request once the
// inputs are gathered.
type LeaseOutcome int

// Outcomes of grant, renew and release decisions.
const (
	// OutcomeCreate: no Lease object exists yet; create it (201).
	OutcomeCreate LeaseOutcome = iota + 1
	// OutcomeTakeOver: the object exists but holds nothing live; overwrite
	// it with a new grant (201).
	OutcomeTakeOver
	// OutcomeRegrant: the same operation holds it live; rotate the token and
	// restart the expiry (200).
	OutcomeRegrant
	// OutcomeRenew: extend the expiry (200).
	OutcomeRenew
	// OutcomeRelease: mark released (204).
	OutcomeRelease
	// OutcomeNothingToRelease: absent, expired or terminal (204).
	OutcomeNothingToRelease
	// OutcomeHeld: the migration mutex is held by another operation (409).
	OutcomeHeld
	// OutcomeRevoked: the operation was revoked (409).
	OutcomeRevoked
	// OutcomeRevokeStale: a lease of RevokeOperation held authority when the
	// topology moved (leases.FencedByMove); revoke the operation
	// (topology_changed) and decide again.
	OutcomeRevokeStale
	// OutcomeStaleView: a record is newer than the caller's view of the
	// group; read the group again and decide again.
	OutcomeStaleView
	// OutcomeMigrationNotHeld: a failover-hold asked by someone who is not
	// the live migration holder (403).
	OutcomeMigrationNotHeld
	// OutcomeTokenMismatch: wrong, stale or missing lease token (403).
	OutcomeTokenMismatch
	// OutcomeNotFound: renewal of an unknown or ended lease (404).
	OutcomeNotFound
	// OutcomeUnstable: the request would succeed but the group is between
	// confirmed states (423); nothing is written.
	OutcomeUnstable
	// OutcomeCloseGate: the migration mutex holds an ended operation's
	// unconfirmed DDL (leases.Record.UnconfirmedDDL) that its database does
	// not record yet; record it there (CloseGate on GateOperation's
	// instance) and decide again. A grant never overwrites that evidence
	// before it is recorded.
	OutcomeCloseGate
	// OutcomeVerificationRequired: a migration grant for an instance whose
	// gate is closed, or a re-grant of an operation whose record says ddl
	// (409 verification_required).
	OutcomeVerificationRequired
	// OutcomeGrantInFlight: the migration mutex holds another operation's
	// record that the move fences but that may still be a grant in flight
	// (leases.AwaitingConfirmation): answered 423 like OutcomeUnstable,
	// nothing written, and only once confirmed on fresh reads.
	OutcomeGrantInFlight
	// OutcomeDeferralBudgetExhausted: a failover-hold grant that would
	// succeed while a planned operation's deferral budget is spent and the
	// operation has not run yet (409 deferral_budget_exhausted).
	OutcomeDeferralBudgetExhausted
)

// Decision is an outcome and what it refers to.
type Decision struct {
	Outcome LeaseOutcome
	// Holder is the live migration record, for OutcomeHeld.
	Holder *leases.Record
	// RevokeOperation is the operation to revoke, for OutcomeRevokeStale.
	RevokeOperation string
	// Reason of the revocation, for OutcomeRevoked.
	Reason string
	// Gate is the operation a migration grant waits on, for
	// OutcomeVerificationRequired; the record to record, for
	// OutcomeCloseGate.
	Gate *leases.Record
	// Next is the record to write, for OutcomeRenew and OutcomeRelease: the
	// decision says what the lease becomes, the caller only writes it.
	Next *leases.Record
}

// GroupView is what lease decisions need of the group, read fresh.
type GroupView struct {
	// UID of the group: records of another incarnation count for nothing.
	UID        string
	Generation int64
	// MovedAt is when Generation was written (status.topologyGenerationTime).
	MovedAt time.Time
	// Transition: an active-site change is unconfirmed; no grant or renewal.
	Transition bool
	// Reservation: a planned operation is admitted; no failover-hold grant or
	// renewal.
	Reservation bool
	// RevokePending: the revoke annotation is present; no grant until the
	// controller has revoked every live lease and removed it.
	RevokePending bool
	// DeferralBudgetSpent: a planned operation's deferral budget is spent
	// and the operation has not run; no failover-hold grant.
	DeferralBudgetSpent bool
}

// Move is the view's last move of the topology.
func (g GroupView) Move() leases.Move { return leases.Move{Generation: g.Generation, At: g.MovedAt} }

func (g GroupView) unstableFor(kind leases.Kind) bool {
	return g.Transition || (kind == leases.KindFailoverHold && g.Reservation)
}

// unstableForGrant adds, for grants only, the revoke annotation.
func (g GroupView) unstableForGrant(kind leases.Kind) bool {
	return g.unstableFor(kind) || g.RevokePending
}

// newerThanView tells whether one of recs (of this incarnation) was written
// under a generation the view has not seen: the view is stale.
func newerThanView(g GroupView, recs ...*leases.Record) bool {
	for _, r := range recs {
		if r.BelongsTo(g.UID) && r.Generation > g.Generation {
			return true
		}
	}
	return false
}

// GrantOvertaken tells whether a grant written at generation must be
// withdrawn, judged on the group as re-read after the write: the fence moved
// past the grant (the lease was fenced before it existed), or the group
// became unstable for its kind (a transition for any grant; a reservation
// for a failover-hold, because the controller reads holds only after it has
// written its reservation; the revoke annotation for any grant, because the
// controller lists leases only after the annotation is present).
func GrantOvertaken(kind leases.Kind, generation int64, g GroupView) bool {
	return g.Generation != generation || g.unstableForGrant(kind)
}

// GrantInput is what a POST decision needs.
type GrantInput struct {
	Kind        leases.Kind
	OperationID string
	Instance    string
	Identity    string
	Group       GroupView
	// Tombstone of the operation, nil when none.
	Tombstone *leases.Record
	// Migration is the group's migration mutex record, nil when the object
	// does not exist.
	Migration *leases.Record
	// Hold is this operation's failover-hold record, nil when the object does
	// not exist (hold grants only).
	Hold *leases.Record
	// Verification is the schema-verification gate (migration grants only).
	Verification VerificationView
	Now          time.Time
}

// VerificationView is what a migration grant needs of the gate, read
// fresh, after the migration record.
type VerificationView struct {
	// Pending is the operation the requested instance's database waits on
	// (OperationID and Generation set), nil when its gate is open.
	Pending *leases.Record
	// MigrationRecorded: the migration record's instance's database
	// already accounts for its unconfirmed DDL (GateRecorded), or is gone.
	// Meaningless when the record has none.
	MigrationRecorded bool
}

// DecideGrant decides a POST. Failures are ordered 403, 409, 423: a request
// is answered 423 only when it would otherwise have been granted. A record
// that held authority when the topology moved is revoked first, whoever's it
// is: a grant never overwrites the evidence that an operation was fenced.
// While that record may still be another operation's grant in flight that
// landed after the move (leases.AwaitingConfirmation), the answer is 423:
// its own request withdraws it, or the window ends and it is revoked.
func DecideGrant(in GrantInput) Decision {
	if in.Tombstone != nil {
		return Decision{Outcome: OutcomeRevoked, Reason: in.Tombstone.Reason}
	}
	if newerThanView(in.Group, in.Migration, in.Hold) {
		return Decision{Outcome: OutcomeStaleView}
	}
	if m := in.Migration; leases.FencedByMove(m, in.Group.UID, in.Group.Move(), in.Now) {
		if leases.AwaitingConfirmation(m, in.Now) && m.OperationID != in.OperationID {
			// Maybe another operation's grant in flight that landed after
			// the move: its request withdraws it. Neither revoked nor
			// taken over meanwhile; ask again. (The operation's own
			// requests come after its grant was answered: they fence it.)
			return Decision{Outcome: OutcomeGrantInFlight}
		}
		return Decision{Outcome: OutcomeRevokeStale, RevokeOperation: m.OperationID}
	}
	m := in.Migration
	if !m.BelongsTo(in.Group.UID) {
		m = foreign(m) // left over from a deleted group of the same name
	}
	in.Migration = m
	if h := in.Hold; h != nil && !h.BelongsTo(in.Group.UID) {
		in.Hold = foreign(h)
	}
	ownM := m != nil && m.OperationID == in.OperationID
	if ownM && m.State == leases.StateRevoked {
		return Decision{Outcome: OutcomeRevoked, Reason: m.Reason}
	}
	var d Decision
	switch in.Kind {
	case leases.KindMigration:
		if g, gated := decideGate(in); gated {
			return g
		}
		d = decideMigrationGrant(in)
	case leases.KindFailoverHold:
		d = decideHoldGrant(in)
	}
	if isSuccess(d.Outcome) && in.Group.unstableForGrant(in.Kind) {
		return Decision{Outcome: OutcomeUnstable}
	}
	return d
}

// decideGate: a migration grant first records an ended operation's
// unconfirmed DDL, then is refused for an operation whose record says ddl
// (a second runner never resumes uncertain DDL) and for an instance whose
// gate is closed. These 409s come before mutex_held and 423: neither a
// retry nor a stable group changes them.
func decideGate(in GrantInput) (Decision, bool) {
	m := in.Migration
	switch {
	case m.UnconfirmedDDL(in.Now) && !in.Verification.MigrationRecorded:
		return Decision{Outcome: OutcomeCloseGate, Gate: m}, true
	case m.Live(in.Now) && m.OperationID == in.OperationID && m.Instance == in.Instance && m.Phase.Effective() == leases.PhaseDDL:
		return Decision{Outcome: OutcomeVerificationRequired, Gate: m}, true
	case in.Verification.Pending != nil:
		return Decision{Outcome: OutcomeVerificationRequired, Gate: in.Verification.Pending}, true
	}
	return Decision{}, false
}

func decideMigrationGrant(in GrantInput) Decision {
	m := in.Migration
	switch {
	case m == nil:
		return Decision{Outcome: OutcomeCreate}
	case !m.Live(in.Now):
		return Decision{Outcome: OutcomeTakeOver}
	case m.OperationID == in.OperationID && m.Instance == in.Instance && m.Identity == in.Identity:
		return Decision{Outcome: OutcomeRegrant}
	default:
		return Decision{Outcome: OutcomeHeld, Holder: m}
	}
}

// decideHoldGrant: 403 migration_not_held, then 409 (revoked, then a spent
// deferral budget), then, in DecideGrant, 423.
func decideHoldGrant(in GrantInput) Decision {
	d := decideHoldGrantIgnoringBudget(in)
	if isSuccess(d.Outcome) && in.Group.DeferralBudgetSpent {
		return Decision{Outcome: OutcomeDeferralBudgetExhausted}
	}
	return d
}

func decideHoldGrantIgnoringBudget(in GrantInput) Decision {
	m := in.Migration
	if !m.Live(in.Now) || m.OperationID != in.OperationID || m.Instance != in.Instance || m.Identity != in.Identity {
		return Decision{Outcome: OutcomeMigrationNotHeld}
	}
	h := in.Hold
	switch {
	case h == nil:
		return Decision{Outcome: OutcomeCreate}
	case h.State == leases.StateRevoked:
		return Decision{Outcome: OutcomeRevoked, Reason: h.Reason}
	case !h.Live(in.Now):
		return Decision{Outcome: OutcomeTakeOver}
	default:
		return Decision{Outcome: OutcomeRegrant}
	}
}

// foreign stands for a record of another incarnation of the group: the
// object exists (so a grant overwrites it) but holds nothing.
func foreign(r *leases.Record) *leases.Record {
	if r == nil {
		return nil
	}
	return &leases.Record{Kind: r.Kind, State: leases.StateExpired}
}

func isSuccess(o LeaseOutcome) bool {
	switch o {
	case OutcomeCreate, OutcomeTakeOver, OutcomeRegrant, OutcomeRenew:
		return true
	}
	return false
}

// RenewInput is what a PUT decision needs.
type RenewInput struct {
	Kind        leases.Kind
	OperationID string
	Token       string
	// TTLSeconds is the caller's ttlSeconds, nil when omitted (the lease
	// keeps its ttl).
	TTLSeconds *int64
	// Phase is the renewal's phase, empty when omitted (migration only;
	// the record keeps the furthest phase reported).
	Phase leases.Phase
	Group GroupView
	// Record is the operation's record of Kind, nil when the object does not
	// exist, records another operation, or belongs to another incarnation of
	// the group.
	Record *leases.Record
	// Migration is the group's migration mutex record, for a failover-hold
	// renewal: a hold lives only while its operation holds the live mutex.
	Migration *leases.Record
	// Tombstone of the operation; gathered when Record is nil.
	Tombstone *leases.Record
	Now       time.Time
}

// DecideRenew decides a PUT: 409 for a revoked operation, 404 for an unknown
// or ended lease (a failover-hold whose operation no longer holds the live
// migration mutex included), 403 for a wrong token, then the fence, then 423.
// A lease that ended after the move it was fenced by is revoked, not 404.
func DecideRenew(in RenewInput) Decision {
	r := in.Record
	if newerThanView(in.Group, r, in.Migration) {
		return Decision{Outcome: OutcomeStaleView}
	}
	if r != nil && r.State != leases.StateRevoked && !r.Live(in.Now) && leases.FencedByMove(r, in.Group.UID, in.Group.Move(), in.Now) {
		return Decision{Outcome: OutcomeRevokeStale, RevokeOperation: in.OperationID}
	}
	switch {
	case r == nil && in.Tombstone != nil:
		return Decision{Outcome: OutcomeRevoked, Reason: in.Tombstone.Reason}
	case r == nil:
		return Decision{Outcome: OutcomeNotFound}
	case r.State == leases.StateRevoked:
		return Decision{Outcome: OutcomeRevoked, Reason: r.Reason}
	case !r.Live(in.Now):
		return Decision{Outcome: OutcomeNotFound}
	case in.Kind == leases.KindFailoverHold && !leases.HoldLive(r, in.Migration, in.Now):
		return Decision{Outcome: OutcomeNotFound}
	case !leases.TokenMatches(in.Token, r.TokenHash):
		return Decision{Outcome: OutcomeTokenMismatch}
	case r.Generation < in.Group.Generation:
		return Decision{Outcome: OutcomeRevokeStale, RevokeOperation: in.OperationID}
	case in.Group.unstableFor(in.Kind):
		return Decision{Outcome: OutcomeUnstable}
	}
	next := r.Renewed(ClampTTL(in.TTLSeconds, r.TTLSeconds), in.Now).Advanced(in.Phase)
	return Decision{Outcome: OutcomeRenew, Next: &next}
}

// DecideRelease decides a DELETE: idempotent for anything not live, 403 for
// a live lease without its token. A lease fenced by a move (live, or ended
// after the move) is revoked instead of released: the answer is still 204,
// and the revocation is recorded.
func DecideRelease(record *leases.Record, token string, g GroupView, now time.Time) Decision {
	switch {
	case newerThanView(g, record):
		return Decision{Outcome: OutcomeStaleView}
	case record.Live(now) && !leases.TokenMatches(token, record.TokenHash):
		return Decision{Outcome: OutcomeTokenMismatch}
	case leases.FencedByMove(record, g.UID, g.Move(), now):
		return Decision{Outcome: OutcomeRevokeStale, RevokeOperation: record.OperationID}
	case !record.Live(now):
		return Decision{Outcome: OutcomeNothingToRelease}
	}
	next := record.Released(now)
	return Decision{Outcome: OutcomeRelease, Next: &next}
}

// DecideReport decides whether a release that found its operation's
// migration record already ended (revoked, expired or released) records the
// client's outcome on it: the record is the operation's (its token
// matches), no outcome was recorded yet, and one is reported. The release
// still answers 204; only the report is written. A live record takes the
// report with its release instead (Record.Reported on the released record).
func DecideReport(record *leases.Record, token string, outcome leases.Outcome, now time.Time) (leases.Record, bool) {
	if record == nil || outcome == "" || record.Kind != leases.KindMigration || record.Live(now) ||
		record.Outcome != "" || !leases.TokenMatches(token, record.TokenHash) {
		return leases.Record{}, false
	}
	return record.Reported(outcome), true
}
