package policy

import (
	"fmt"
	"slices"
	"time"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
)

// AdmissionVerdict is what a planned operation does now.
type AdmissionVerdict int

// Verdicts of Admit.
const (
	// Admitted: no live failover-hold and the target is ready; reserve and go.
	Admitted AdmissionVerdict = iota + 1
	// DeferForHold: a live failover-hold defers the operation until RetryTime.
	DeferForHold
	// WaitForTarget: no hold, but the target is not ready; retry later.
	WaitForTarget
)

// AdmissionInput is what admission needs. Leases is every deployment lease
// record of the group, of any kind and state, read fresh.
type AdmissionInput struct {
	Now      time.Time
	GroupUID string
	Leases   []*leases.Record
	// TargetReady tells whether the target site can be promoted and every
	// other site can be fenced first (PlannedReady); TargetReason says why
	// not, naming the site.
	TargetReady bool
	// TargetWait is PlannedReady's reason (WaitTargetNotReady,
	// WaitSiteUnreachable), TargetReason its message.
	TargetWait   string
	TargetReason string
	// BudgetSpent: the request's deferral budget is used up
	// (DecideDeferralBudget): live holds no longer defer it.
	BudgetSpent bool
}

// Admission is the decision.
type Admission struct {
	Verdict AdmissionVerdict
	// RetryTime, for DeferForHold: the earliest moment a live hold can stop
	// deferring, the earlier of its own expiry and its mutex's
	// (leases.DeferralEnd).
	RetryTime time.Time
	// Blocker is the live hold expiring first.
	Blocker *leases.Record
	// Reason, for WaitForTarget: PlannedReady's reason.
	Reason  string
	Message string
	// Revoke: live holds that no longer defer the request because its
	// deferral budget is spent; each is revoked with reason
	// deferral_budget_exhausted before the operation proceeds.
	Revoke []*leases.Record
	// Lapsed, for Admitted: holds whose record is still active although they
	// no longer defer anything (expired, or their operation lost the
	// mutex). An admission stands only once each is recorded as expired with
	// the resourceVersion it was read at, so a renewal or re-grant decided
	// before the lapse and written after it conflicts instead of succeeding
	// beside the admission.
	Lapsed []*leases.Record
}

// Admit decides whether a planned operation (planned failover, ordered
// update, restore-in-place) may start. Only live failover-holds defer it
// (leases.HoldLive: the hold is live and its operation holds the live
// migration mutex); a migration lease alone defers nothing. Holds come first:
// a deferral is reported even when the target is not ready either.
func Admit(in AdmissionInput) Admission {
	effective := leases.Effective(in.Leases, in.GroupUID, in.Now)
	var mig, first *leases.Record
	for _, r := range effective {
		if r.Kind == leases.KindMigration {
			mig = r
		}
	}
	var firstEnd time.Time
	var revoke []*leases.Record
	for _, r := range effective {
		if r.Kind != leases.KindFailoverHold {
			continue
		}
		if in.BudgetSpent {
			revoke = append(revoke, r)
			continue
		}
		end := leases.DeferralEnd(r, mig)
		if first == nil || end.Before(firstEnd) || (end.Equal(firstEnd) && r.OperationID < first.OperationID) {
			first, firstEnd = r, end
		}
	}
	if first != nil {
		return Admission{Verdict: DeferForHold, RetryTime: firstEnd, Blocker: first,
			Message: fmt.Sprintf("deferred by failover-hold of operation %s (instance %s)", first.OperationID, first.Instance)}
	}
	if !in.TargetReady {
		return Admission{Verdict: WaitForTarget, Reason: in.TargetWait, Message: in.TargetReason, Revoke: revoke}
	}
	var lapsed []*leases.Record
	for _, r := range in.Leases {
		if r.Kind == leases.KindFailoverHold && r.State == leases.StateActive && r.BelongsTo(in.GroupUID) && !slices.Contains(revoke, r) {
			lapsed = append(lapsed, r) // active, yet not effective: it lapsed
		}
	}
	return Admission{Verdict: Admitted, Lapsed: lapsed, Revoke: revoke}
}

// Request names a planned operation: its kind (PlannedFailover,
// OrderedUpdate, RestoreInPlace) and the ID of its request.
type Request struct {
	Operation bloodravenv1alpha1.OperationName
	ID        string
}

// ReservationStands tells whether a reservation for res still belongs to a
// request: one of requests has its operation and ID, or a transition of its
// operation (transitionOp) is under way and must finish or roll back first.
// A reservation that no longer stands is released at once, so 423 stays
// transient when a request is removed or replaced.
func ReservationStands(res Request, requests []Request, transitionOp bloodravenv1alpha1.OperationName) bool {
	if transitionOp != "" && transitionOp == res.Operation {
		return true
	}
	for _, r := range requests {
		if r == res {
			return true
		}
	}
	return false
}
