package policy

import (
	"fmt"
	"time"

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
	Now    time.Time
	Leases []*leases.Record
	// TargetReady tells whether the target site can be promoted;
	// TargetReason says why not.
	TargetReady  bool
	TargetReason string
}

// Admission is the decision.
type Admission struct {
	Verdict AdmissionVerdict
	// RetryTime, for DeferForHold: the earliest expiry among live holds.
	RetryTime time.Time
	// Blocker is the live hold expiring first.
	Blocker *leases.Record
	Message string
}

// Admit decides whether a planned operation (planned failover, ordered
// update, restore-in-place) may start. Only live failover-holds defer it; a
// migration lease alone defers nothing. Holds come first: a deferral is
// reported even when the target is not ready either.
func Admit(in AdmissionInput) Admission {
	var first *leases.Record
	for _, r := range in.Leases {
		if r.Kind != leases.KindFailoverHold || !r.Live(in.Now) {
			continue
		}
		if first == nil || r.ExpiresAt.Before(first.ExpiresAt) ||
			(r.ExpiresAt.Equal(first.ExpiresAt) && r.OperationID < first.OperationID) {
			first = r
		}
	}
	if first != nil {
		return Admission{Verdict: DeferForHold, RetryTime: first.ExpiresAt, Blocker: first,
			Message: fmt.Sprintf("deferred by failover-hold of operation %s (instance %s)", first.OperationID, first.Instance)}
	}
	if !in.TargetReady {
		return Admission{Verdict: WaitForTarget, Message: in.TargetReason}
	}
	return Admission{Verdict: Admitted}
}
