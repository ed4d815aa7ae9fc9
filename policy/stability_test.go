package policy

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// healthy is a bootstrapped group with nothing in flight.
func healthy() bloodravenv1alpha1.MysqlFailoverGroupStatus {
	return bloodravenv1alpha1.MysqlFailoverGroupStatus{
		ActiveSite:         "iad",
		TopologyGeneration: 17,
		Health:             bloodravenv1alpha1.Health{Ready: true, ReplicationRunning: true},
	}
}

func withCondition(t string) func(*bloodravenv1alpha1.MysqlFailoverGroupStatus) {
	return func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) {
		s.Conditions = append(s.Conditions, metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: "Test"})
	}
}

func TestStability(t *testing.T) {
	tests := map[string]struct {
		mutate     func(*bloodravenv1alpha1.MysqlFailoverGroupStatus)
		wantReason string
	}{
		"healthy group is stable":           {mutate: func(*bloodravenv1alpha1.MysqlFailoverGroupStatus) {}},
		"lag alone never makes it unstable": {mutate: func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) { s.Health.ReplicationLagSeconds = 3600 }},
		"a completed planned failover is not active": {mutate: func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) {
			s.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverStatus{Phase: bloodravenv1alpha1.PlannedFailoverPhaseCompleted}
		}},
		"a failed planned failover is not active": {mutate: func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) {
			s.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverStatus{Phase: bloodravenv1alpha1.PlannedFailoverPhaseFailed}
		}},
		"a false Degraded condition is not a cause": {mutate: func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) {
			s.Conditions = []metav1.Condition{{Type: bloodravenv1alpha1.ConditionDegraded, Status: metav1.ConditionFalse}}
		}},
		"a completed ordered update is not active": {mutate: func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) { s.UpdatePhase = "Completed" }},
		"unconfirmed transition": {mutate: func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) {
			s.Transition = &bloodravenv1alpha1.TopologyTransition{Operation: "PlannedFailover"}
		}, wantReason: UnstableTopologyTransition},
		"operation reservation": {mutate: func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) {
			s.Reservation = &bloodravenv1alpha1.OperationReservation{Operation: "PlannedFailover"}
		}, wantReason: UnstableOperationReserved},
		"planned failover admitting": {mutate: func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) {
			s.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverStatus{Phase: bloodravenv1alpha1.PlannedFailoverPhaseAdmitting}
		}, wantReason: "PlannedFailoverAdmitting"},
		"planned failover deferred": {mutate: func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) {
			s.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverStatus{Phase: bloodravenv1alpha1.PlannedFailoverPhaseDeferred}
		}, wantReason: "PlannedFailoverDeferred"},
		"planned failover promoting": {mutate: func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) {
			s.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverStatus{Phase: bloodravenv1alpha1.PlannedFailoverPhasePromoting}
		}, wantReason: "PlannedFailoverPromoting"},
		"ordered update in progress":      {mutate: func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) { s.UpdatePhase = "Updating" }, wantReason: UnstableOrderedUpdate},
		"restore in place in progress":    {mutate: func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) { s.RestoreInPlace = "Restoring" }, wantReason: UnstableRestoreInPlace},
		"dragonfly upgrade in progress":   {mutate: func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) { s.DragonflyUpgrade = "Upgrading" }, wantReason: UnstableDragonflyUpgrade},
		"automatic failover held":         {mutate: withCondition(bloodravenv1alpha1.ConditionAutomaticFailoverHeld), wantReason: UnstableAutomaticFailoverHeld},
		"degraded condition":              {mutate: withCondition(bloodravenv1alpha1.ConditionDegraded), wantReason: UnstableDegraded},
		"degraded reason in health":       {mutate: func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) { s.Health.DegradedReason = "ReplicaLost" }, wantReason: UnstableDegraded},
		"split brain":                     {mutate: withCondition(bloodravenv1alpha1.ConditionSplitBrain), wantReason: UnstableSplitBrain},
		"no primary condition":            {mutate: withCondition(bloodravenv1alpha1.ConditionNoPrimary), wantReason: UnstableNoPrimary},
		"not bootstrapped has no primary": {mutate: func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) { s.ActiveSite = "" }, wantReason: UnstableNoPrimary},
		"recovery pending":                {mutate: func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) { s.Health.RecoveryPending = true }, wantReason: UnstableRecoveryPending},
		"replication not running":         {mutate: func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) { s.Health.ReplicationRunning = false }, wantReason: UnstableReplicationNotRunning},
		"the first cause wins: operation over health": {mutate: func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) {
			s.UpdatePhase = "Updating"
			s.Health.ReplicationRunning = false
		}, wantReason: UnstableOrderedUpdate},
		"the first cause wins: deferred over held": {mutate: func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) {
			s.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverStatus{Phase: bloodravenv1alpha1.PlannedFailoverPhaseDeferred}
			withCondition(bloodravenv1alpha1.ConditionAutomaticFailoverHeld)(s)
		}, wantReason: "PlannedFailoverDeferred"},
		"the first cause wins: split brain over replication": {mutate: func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) {
			withCondition(bloodravenv1alpha1.ConditionSplitBrain)(s)
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
