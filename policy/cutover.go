package policy

import (
	"fmt"
	"time"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/deployclient/wire"
)

// Reasons the group refuses an online schema change's cut-over now, in the
// order they are checked (docs/online-schema-change.md). The client adds
// its own (the generation it was granted at, its lease's deadline); these
// are the group's.
const (
	// CutOverPlannedOperationDue: a planned operation's deferral budget
	// runs out within the margin; it will then proceed whatever the holds
	// say, revoking them.
	CutOverPlannedOperationDue = wire.CutOverPlannedOperationDue
	// CutOverPlannedOperationPending: a planned operation is in flight
	// (Admitting, Deferred, Promoting, ...) or has reserved the group: a
	// person asked to move the primary, and a cut-over now would race it.
	CutOverPlannedOperationPending = wire.CutOverPlannedOperationPending
	// CutOverGroupUnstable: the group is not stable for another cause (a
	// transition, Degraded, SplitBrain, NoPrimary, recovery pending,
	// replication stopped, automatic failover held); the message names it.
	CutOverGroupUnstable = wire.CutOverGroupUnstable
)

// DefaultCutOverMargin is the margin the observation judges "due within a
// margin" by: `bloodraven-deploy cut-over`'s default --budget, the time a
// tool's cut-over may take.
const DefaultCutOverMargin = wire.DefaultCutOverMargin

// CutOverVerdict is whether the group allows an online schema change to
// cut over now and, when not, the first reason and a message for people.
type CutOverVerdict struct {
	Allowed bool
	Reason  string
	Message string
}

// CutOver judges the group's side of a cut-over at now: no planned
// operation due within margin (its deferral budget running out), none in
// flight or reserving the group, and the group stable. It says nothing
// about a particular run: the client also requires its grant generation to
// be the group's and its confirmed lease deadline to leave the margin.
func CutOver(st *bloodravenv1alpha1.MysqlFailoverGroupStatus, now time.Time, margin time.Duration) CutOverVerdict {
	for _, b := range st.DeferralBudgets {
		if left := b.ExhaustsAt.Sub(now); left < margin {
			return CutOverVerdict{Reason: CutOverPlannedOperationDue, Message: fmt.Sprintf(
				"the deferral budget of %s %q runs out in %s (at %s), within the cut-over margin %s: it then proceeds whatever the holds say",
				b.Operation, b.ID, max(left, 0).Round(time.Second), b.ExhaustsAt.UTC().Format(time.RFC3339), margin)}
		}
	}
	if res := st.Reservation; res != nil {
		return CutOverVerdict{Reason: CutOverPlannedOperationPending, Message: fmt.Sprintf("%s %q has reserved the group", res.Operation, res.ID)}
	}
	for _, name := range bloodravenv1alpha1.PlannedOperations {
		if op := st.Operation(name, nil); op.Active() {
			msg := fmt.Sprintf("%s %q is %s", op.Name, op.ID, op.Phase)
			if op.Reason != "" {
				msg += " (" + op.Reason + ")"
			}
			return CutOverVerdict{Reason: CutOverPlannedOperationPending, Message: msg + ": cut over once it has run or been withdrawn"}
		}
	}
	if stable, why := Stability(st); !stable {
		return CutOverVerdict{Reason: CutOverGroupUnstable, Message: "the group is not stable: " + why}
	}
	return CutOverVerdict{Allowed: true}
}
