package v1alpha1

import (
	"reflect"
	"testing"
)

// Every planned operation reads back, in the one shape, what was set; and
// the status it is set into keeps its v1alpha1 wire form.
func TestOperationStatusRoundTripsThroughTheV1alpha1Fields(t *testing.T) {
	adm := &Admission{DeferReason: DeferReasonDeploymentHold, Message: "m"}
	spec := &MysqlFailoverGroupSpec{UpdateRevision: "r2"}
	tests := map[string]struct {
		set  OperationStatus
		want OperationStatus // what Operation reads back
		wire func(st *MysqlFailoverGroupStatus) bool
	}{
		"a planned failover keeps its target, reason and admission": {
			set:  OperationStatus{Name: OperationPlannedFailover, ID: "pf-1", Target: "pdx", Phase: PhaseDeferred, Reason: DeferReasonDeploymentHold, Admission: adm},
			want: OperationStatus{Name: OperationPlannedFailover, ID: "pf-1", Target: "pdx", Phase: PhaseDeferred, Reason: DeferReasonDeploymentHold, Admission: adm},
			wire: func(st *MysqlFailoverGroupStatus) bool {
				pf := st.PlannedFailover
				return pf != nil && pf.ID == "pf-1" && pf.TargetSite == "pdx" && pf.Phase == PlannedFailoverPhaseDeferred && pf.Admission == adm
			},
		},
		"an ordered update is its phase; its ID is the spec's revision": {
			set:  OperationStatus{Name: OperationOrderedUpdate, ID: "ignored", Phase: PhaseFailingOver, Reason: "dropped", Admission: adm},
			want: OperationStatus{Name: OperationOrderedUpdate, ID: "r2", Phase: PhaseFailingOver},
			wire: func(st *MysqlFailoverGroupStatus) bool { return st.UpdatePhase == PhaseFailingOver },
		},
		"a restore-in-place is its phase and its request's ID": {
			set:  OperationStatus{Name: OperationRestoreInPlace, ID: "rip-1", Phase: PhaseRestoring, Reason: "dropped"},
			want: OperationStatus{Name: OperationRestoreInPlace, ID: "rip-1", Phase: PhaseRestoring},
			wire: func(st *MysqlFailoverGroupStatus) bool {
				return st.RestoreInPlace == PhaseRestoring && st.RestoreInPlaceID == "rip-1"
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var st MysqlFailoverGroupStatus
			st.SetOperation(tc.set)
			if got := st.Operation(tc.set.Name, spec); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("read back %+v, want %+v", got, tc.want)
			}
			if !tc.wire(&st) {
				t.Errorf("the v1alpha1 fields hold %+v", st)
			}
			for _, other := range PlannedOperations {
				if other != tc.set.Name && st.Operation(other, spec).Phase != PhaseNone {
					t.Errorf("setting %s gave %s a phase", tc.set.Name, other)
				}
			}
		})
	}
}

// A status that records no operation reads as no phase, never active.
func TestAnEmptyStatusHasNoOperationInFlight(t *testing.T) {
	var st MysqlFailoverGroupStatus
	for _, name := range PlannedOperations {
		if s := st.Operation(name, nil); s.Active() || s.Name != name {
			t.Errorf("%s: %+v", name, s)
		}
	}
}
