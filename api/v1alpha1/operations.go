package v1alpha1

// OperationName names an operation of the group: one that moves the
// primary (status.transition.operation) or reserves the group
// (status.reservation.operation). On the wire it is a plain string.
type OperationName string

// Operations of a group.
const (
	OperationBootstrap         OperationName = "Bootstrap"
	OperationPlannedFailover   OperationName = "PlannedFailover"
	OperationEmergencyFailover OperationName = "EmergencyFailover"
	OperationOrderedUpdate     OperationName = "OrderedUpdate"
	OperationRestoreInPlace    OperationName = "RestoreInPlace"
)

// PlannedOperations are the operations a spec requests and the admission
// gate admits, in the order the controller runs them and stability reports
// them.
var PlannedOperations = []OperationName{OperationPlannedFailover, OperationOrderedUpdate, OperationRestoreInPlace}

// OperationStatus is the progress of one planned operation in the one shape
// they all share. It is not stored as such: v1alpha1 keeps the planned
// failover as a struct (status.plannedFailover) and the ordered update and
// restore-in-place as a phase (status.updatePhase, status.restoreInPlace,
// with status.restoreInPlaceID), which is also the wire form of the
// deployment API's GET. Operation and SetOperation map between the two, so
// the controller's fail, advance and withdraw, and policy's stability,
// are loops over PlannedOperations.
// +kubebuilder:object:generate=false
type OperationStatus struct {
	Name OperationName
	// ID of the request: spec.plannedFailover.id, the revision being
	// applied (spec.updateRevision), or spec.restoreInPlace.id.
	ID string
	// Target site, where the status records one (planned failover).
	Target string
	Phase  OperationPhase
	// Reason and Admission are recorded for the planned failover only.
	Reason    string
	Admission *Admission
}

// Active tells whether the operation is in flight.
func (s OperationStatus) Active() bool { return s.Phase.Active() }

// Operation reads the status of the planned operation name. spec supplies
// what status does not record (the revision an ordered update applies).
func (st *MysqlFailoverGroupStatus) Operation(name OperationName, spec *MysqlFailoverGroupSpec) OperationStatus {
	s := OperationStatus{Name: name}
	switch name {
	case OperationPlannedFailover:
		if pf := st.PlannedFailover; pf != nil {
			s.ID, s.Target, s.Phase, s.Reason, s.Admission = pf.ID, pf.TargetSite, OperationPhase(pf.Phase), pf.Reason, pf.Admission
		}
	case OperationOrderedUpdate:
		s.Phase = st.UpdatePhase
		if spec != nil {
			s.ID = spec.UpdateRevision
		}
	case OperationRestoreInPlace:
		s.ID, s.Phase = st.RestoreInPlaceID, st.RestoreInPlace
	}
	return s
}

// SetOperation records s in the status, in its v1alpha1 form. What that
// form has no field for (an ordered update's reason and admission) is
// dropped; a planned failover's status is created when absent.
func (st *MysqlFailoverGroupStatus) SetOperation(s OperationStatus) {
	switch s.Name {
	case OperationPlannedFailover:
		if st.PlannedFailover == nil {
			st.PlannedFailover = &PlannedFailoverStatus{}
		}
		pf := st.PlannedFailover
		pf.ID, pf.TargetSite, pf.Phase, pf.Reason, pf.Admission = s.ID, s.Target, PlannedFailoverPhase(s.Phase), s.Reason, s.Admission
	case OperationOrderedUpdate:
		st.UpdatePhase = s.Phase
	case OperationRestoreInPlace:
		st.RestoreInPlaceID, st.RestoreInPlace = s.ID, s.Phase
	}
}
