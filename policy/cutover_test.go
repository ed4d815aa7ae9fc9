package policy

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

func TestTheGroupAllowsACutOverOnlyWhenNothingCanMoveThePrimary(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	budget := func(left time.Duration) func(*bloodravenv1alpha1.MysqlFailoverGroupStatus) {
		return func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) {
			s.DeferralBudgets = append(s.DeferralBudgets, bloodravenv1alpha1.DeferralBudget{
				Operation: bloodravenv1alpha1.OperationPlannedFailover, ID: "req-42", ExhaustsAt: metav1.NewMicroTime(now.Add(left)),
			})
		}
	}
	planned := func(phase bloodravenv1alpha1.PlannedFailoverPhase) func(*bloodravenv1alpha1.MysqlFailoverGroupStatus) {
		return func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) {
			s.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverStatus{ID: "req-42", TargetSite: "pdx", Phase: phase, Reason: "DeploymentHold"}
		}
	}
	tests := map[string]struct {
		mutate  []func(*bloodravenv1alpha1.MysqlFailoverGroupStatus)
		margin  time.Duration
		reason  string
		message string
	}{
		"a stable group with nothing planned allows it": {},
		"a completed planned failover is history":       {mutate: fs(planned(bloodravenv1alpha1.PlannedFailoverPhaseCompleted))},
		"a failed planned failover is history":          {mutate: fs(planned(bloodravenv1alpha1.PlannedFailoverPhaseFailed))},
		"a planned failover Admitting is pending": {mutate: fs(planned(bloodravenv1alpha1.PlannedFailoverPhaseAdmitting)),
			reason: CutOverPlannedOperationPending, message: `PlannedFailover "req-42" is Admitting`},
		"a planned failover Deferred by a hold is pending": {mutate: fs(planned(bloodravenv1alpha1.PlannedFailoverPhaseDeferred)),
			reason: CutOverPlannedOperationPending, message: `is Deferred (DeploymentHold)`},
		"a planned failover Promoting is pending": {mutate: fs(planned(bloodravenv1alpha1.PlannedFailoverPhasePromoting)),
			reason: CutOverPlannedOperationPending},
		"an ordered update in flight is pending": {mutate: fs(func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) { s.UpdatePhase = "Deferred" }),
			reason: CutOverPlannedOperationPending, message: "OrderedUpdate"},
		"a restore-in-place in flight is pending": {mutate: fs(func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) {
			s.RestoreInPlace, s.RestoreInPlaceID = "Admitting", "restore-1"
		}), reason: CutOverPlannedOperationPending, message: `RestoreInPlace "restore-1"`},
		"a reservation is pending": {mutate: fs(func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) {
			s.Reservation = &bloodravenv1alpha1.OperationReservation{Operation: bloodravenv1alpha1.OperationPlannedFailover, ID: "req-42"}
		}), reason: CutOverPlannedOperationPending, message: "reserved"},
		"a deferral budget running out within the margin is due": {mutate: fs(planned(bloodravenv1alpha1.PlannedFailoverPhaseDeferred), budget(9*time.Second)),
			margin: 10 * time.Second, reason: CutOverPlannedOperationDue, message: "runs out in 9s"},
		"a spent deferral budget is due": {mutate: fs(budget(-time.Second)),
			margin: 10 * time.Second, reason: CutOverPlannedOperationDue, message: "runs out in 0s"},
		"a deferral budget past the margin is not due, its operation still pending": {mutate: fs(planned(bloodravenv1alpha1.PlannedFailoverPhaseDeferred), budget(11*time.Second)),
			margin: 10 * time.Second, reason: CutOverPlannedOperationPending},
		"a budget exactly at the margin is not due": {mutate: fs(budget(10 * time.Second)), margin: 10 * time.Second},
		"a transition under way makes the group unstable": {mutate: fs(func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) {
			s.Transition = &bloodravenv1alpha1.TopologyTransition{}
		}), reason: CutOverGroupUnstable, message: UnstableTopologyTransition},
		"split brain makes the group unstable": {mutate: fs(withCondition(bloodravenv1alpha1.ConditionSplitBrain)),
			reason: CutOverGroupUnstable, message: UnstableSplitBrain},
		"stopped replication makes the group unstable": {mutate: fs(func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) { s.Health.ReplicationRunning = false }),
			reason: CutOverGroupUnstable, message: UnstableReplicationNotRunning},
		"no primary makes the group unstable": {mutate: fs(func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) { s.ActiveSite = "" }),
			reason: CutOverGroupUnstable, message: UnstableNoPrimary},
		"lag alone never refuses it": {mutate: fs(func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) { s.Health.ReplicationLagSeconds = 3600 })},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			st := healthy()
			for _, m := range tc.mutate {
				m(&st)
			}
			got := CutOver(&st, now, tc.margin)
			if got.Allowed != (tc.reason == "") || got.Reason != tc.reason || !strings.Contains(got.Message, tc.message) {
				t.Fatalf("CutOver = %+v, want reason %q with a message naming %q", got, tc.reason, tc.message)
			}
			if !got.Allowed && got.Message == "" {
				t.Fatal("a refusal without a message")
			}
		})
	}
}

func fs(f ...func(*bloodravenv1alpha1.MysqlFailoverGroupStatus)) []func(*bloodravenv1alpha1.MysqlFailoverGroupStatus) {
	return f
}
