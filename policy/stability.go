package policy

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// Reasons a group is not stable, in the order they are checked. The first
// that applies is the group's unstableReason.
const (
	UnstableTopologyTransition    = "TopologyTransition"
	UnstableOperationReserved     = "OperationReserved"
	UnstablePlannedFailoverPrefix = "PlannedFailover" // + the phase, e.g. PlannedFailoverDeferred
	UnstableOrderedUpdate         = "OrderedUpdate"
	UnstableRestoreInPlace        = "RestoreInPlace"
	UnstableDragonflyUpgrade      = "DragonflyUpgrade"
	UnstableAutomaticFailoverHeld = bloodravenv1alpha1.ConditionAutomaticFailoverHeld
	UnstableDegraded              = bloodravenv1alpha1.ConditionDegraded
	UnstableSplitBrain            = bloodravenv1alpha1.ConditionSplitBrain
	UnstableNoPrimary             = bloodravenv1alpha1.ConditionNoPrimary
	UnstableRecoveryPending       = "RecoveryPending"
	UnstableReplicationNotRunning = "ReplicationNotRunning"
)

// Stability tells whether a group is stable and, when it is not, the first
// cause. unstableReason is empty exactly when stable is true. Replication lag
// never makes a group unstable: the lag threshold is the caller's policy.
func Stability(st *bloodravenv1alpha1.MysqlFailoverGroupStatus) (stable bool, unstableReason string) {
	reason := firstUnstableCause(st)
	return reason == "", reason
}

func firstUnstableCause(st *bloodravenv1alpha1.MysqlFailoverGroupStatus) string {
	switch {
	case st.Transition != nil:
		return UnstableTopologyTransition
	case st.Reservation != nil:
		return UnstableOperationReserved
	}
	for _, name := range bloodravenv1alpha1.PlannedOperations {
		if op := st.Operation(name, nil); op.Active() {
			return unstableOperation(op)
		}
	}
	switch {
	case st.DragonflyUpgrade.Active():
		return UnstableDragonflyUpgrade
	case conditionTrue(st.Conditions, bloodravenv1alpha1.ConditionAutomaticFailoverHeld):
		return UnstableAutomaticFailoverHeld
	case conditionTrue(st.Conditions, bloodravenv1alpha1.ConditionDegraded) || st.Health.DegradedReason != "":
		return UnstableDegraded
	case conditionTrue(st.Conditions, bloodravenv1alpha1.ConditionSplitBrain):
		return UnstableSplitBrain
	case conditionTrue(st.Conditions, bloodravenv1alpha1.ConditionNoPrimary) || st.ActiveSite == "":
		return UnstableNoPrimary
	case st.Health.RecoveryPending:
		return UnstableRecoveryPending
	case !st.Health.ReplicationRunning:
		return UnstableReplicationNotRunning
	}
	return ""
}

// unstableOperation is the unstableReason of a running planned operation:
// its name, and for a planned failover also its phase (for example
// PlannedFailoverDeferred), as docs/api.md names them.
func unstableOperation(op bloodravenv1alpha1.OperationStatus) string {
	if op.Name == bloodravenv1alpha1.OperationPlannedFailover {
		return UnstablePlannedFailoverPrefix + string(op.Phase)
	}
	return string(op.Name)
}

func conditionTrue(conds []metav1.Condition, t string) bool {
	return meta.IsStatusConditionTrue(conds, t)
}
