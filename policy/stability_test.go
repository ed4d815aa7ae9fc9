package policy

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// healthy is a bootstrapped group with nothing in flight.
func healthy() v1.MysqlFailoverGroupStatus {
	return v1.MysqlFailoverGroupStatus{
		ActiveSite:         "iad",
		TopologyGeneration: 17,
		Health:             v1.Health{Ready: true, ReplicationRunning: true},
	}
}

func withCondition(t string) func(*v1.MysqlFailoverGroupStatus) {
	return func(s *v1.MysqlFailoverGroupStatus) {
		s.Conditions = append(s.Conditions, metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: "Test"})
	}
}

func TestStability(t *testing.T) {
	tests := map[string]struct {
		mutate     func(*v1.MysqlFailoverGroupStatus)
		wantReason string
	}{
		"healthy group is stable":           {mutate: func(*v1.MysqlFailoverGroupStatus) {}},
		"lag alone never makes it unstable": {mutate: func(s *v1.MysqlFailoverGroupStatus) { s.Health.ReplicationLagSeconds = 3600 }},
		"a completed planned failover is not active": {mutate: func(s *v1.MysqlFailoverGroupStatus) {
			s.PlannedFailover = &v1.PlannedFailoverStatus{Phase: v1.PlannedFailoverPhaseCompleted}
		}},
		"a failed planned failover is not active": {mutate: func(s *v1.MysqlFailoverGroupStatus) {
			s.PlannedFailover = &v1.PlannedFailoverStatus{Phase: v1.PlannedFailoverPhaseFailed}
		}},
		"a false Degraded condition is not a cause": {mutate: func(s *v1.MysqlFailoverGroupStatus) {
			s.Conditions = []metav1.Condition{{Type: v1.ConditionDegraded, Status: metav1.ConditionFalse}}
		}},
		"a completed ordered update is not active": {mutate: func(s *v1.MysqlFailoverGroupStatus) { s.UpdatePhase = "Completed" }},
		"unconfirmed transition": {mutate: func(s *v1.MysqlFailoverGroupStatus) {
			s.Transition = &v1.TopologyTransition{Operation: "PlannedFailover"}
		}, wantReason: UnstableTopologyTransition},
		"operation reservation": {mutate: func(s *v1.MysqlFailoverGroupStatus) {
			s.Reservation = &v1.OperationReservation{Operation: "PlannedFailover"}
		}, wantReason: UnstableOperationReserved},
		"planned failover admitting": {mutate: func(s *v1.MysqlFailoverGroupStatus) {
			s.PlannedFailover = &v1.PlannedFailoverStatus{Phase: v1.PlannedFailoverPhaseAdmitting}
		}, wantReason: "PlannedFailoverAdmitting"},
		"planned failover deferred": {mutate: func(s *v1.MysqlFailoverGroupStatus) {
			s.PlannedFailover = &v1.PlannedFailoverStatus{Phase: v1.PlannedFailoverPhaseDeferred}
		}, wantReason: "PlannedFailoverDeferred"},
		"planned failover promoting": {mutate: func(s *v1.MysqlFailoverGroupStatus) {
			s.PlannedFailover = &v1.PlannedFailoverStatus{Phase: v1.PlannedFailoverPhasePromoting}
		}, wantReason: "PlannedFailoverPromoting"},
		"ordered update in progress":                  {mutate: func(s *v1.MysqlFailoverGroupStatus) { s.UpdatePhase = "Updating" }, wantReason: UnstableOrderedUpdate},
		"restore in place in progress":                {mutate: func(s *v1.MysqlFailoverGroupStatus) { s.RestoreInPlace = "Restoring" }, wantReason: UnstableRestoreInPlace},
		"dragonfly upgrade in progress":               {mutate: func(s *v1.MysqlFailoverGroupStatus) { s.DragonflyUpgrade = "Upgrading" }, wantReason: UnstableDragonflyUpgrade},
		"automatic failover held":                     {mutate: withCondition(v1.ConditionAutomaticFailoverHeld), wantReason: UnstableAutomaticFailoverHeld},
		"degraded condition":                          {mutate: withCondition(v1.ConditionDegraded), wantReason: UnstableDegraded},
		"degraded reason in health":                   {mutate: func(s *v1.MysqlFailoverGroupStatus) { s.Health.DegradedReason = "ReplicaLost" }, wantReason: UnstableDegraded},
		"split brain":                                 {mutate: withCondition(v1.ConditionSplitBrain), wantReason: UnstableSplitBrain},
		"no primary condition":                        {mutate: withCondition(v1.ConditionNoPrimary), wantReason: UnstableNoPrimary},
		"not bootstrapped has no primary":             {mutate: func(s *v1.MysqlFailoverGroupStatus) { s.ActiveSite = "" }, wantReason: UnstableNoPrimary},
		"recovery pending":                            {mutate: func(s *v1.MysqlFailoverGroupStatus) { s.Health.RecoveryPending = true }, wantReason: UnstableRecoveryPending},
		"replication not running":                     {mutate: func(s *v1.MysqlFailoverGroupStatus) { s.Health.ReplicationRunning = false }, wantReason: UnstableReplicationNotRunning},
		"the first cause wins: operation over health": {mutate: func(s *v1.MysqlFailoverGroupStatus) { s.UpdatePhase = "Updating"; s.Health.ReplicationRunning = false }, wantReason: UnstableOrderedUpdate},
		"the first cause wins: deferred over held": {mutate: func(s *v1.MysqlFailoverGroupStatus) {
			s.PlannedFailover = &v1.PlannedFailoverStatus{Phase: v1.PlannedFailoverPhaseDeferred}
			withCondition(v1.ConditionAutomaticFailoverHeld)(s)
		}, wantReason: "PlannedFailoverDeferred"},
		"the first cause wins: split brain over replication": {mutate: func(s *v1.MysqlFailoverGroupStatus) {
			withCondition(v1.ConditionSplitBrain)(s)
			s.Health.ReplicationRunning = false
		}, wantReason: UnstableSplitBrain},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			st := healthy()
			tc.mutate(&st)
			stable, reason := Stability(&st)
			if reason != tc.wantReason {
				t.Fatalf("unstableReason = %q, want %q", reason, tc.wantReason)
			}
			if stable != (reason == "") {
				t.Fatalf("stable = %v with unstableReason %q: must be empty exactly when stable", stable, reason)
			}
		})
	}
}
