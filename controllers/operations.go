package controllers

import (
	"context"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/topology"
)

// operation is one entry of the table of planned operations: how the spec
// requests it, how one pass runs it, and what its promotion does to its
// phase. Withdrawing, failing and advancing an operation, the deferral
// metrics and stability (policy.Stability) are loops over the table and
// bloodravenv1alpha1.OperationStatus; a fourth operation is one entry here, its field in
// status (v1alpha1's Operation and SetOperation), and its steps in policy.
type operation struct {
	name bloodravenv1alpha1.OperationName
	// request is the spec's request of the operation, if any.
	request func(spec *bloodravenv1alpha1.MysqlFailoverGroupSpec) (id string, ok bool)
	// reconcile runs one pass of the operation.
	reconcile func(r *GroupReconciler, ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, sites []topology.SiteState, st *passOutcome) error
	// promoting is the phase in which the operation's transition runs;
	// promoted, with promotedReason, the phase its completed promotion
	// moves it to, in the same status write as the generation bump.
	promoting, promoted bloodravenv1alpha1.OperationPhase
	promotedReason      string
}

// operations is the table, in the order of bloodravenv1alpha1.PlannedOperations. It is a
// function, not a variable, because its entries' passes lead back to it
// (promote advances the operation through the table).
func operations() []operation {
	return []operation{
		{
			name: bloodravenv1alpha1.OperationPlannedFailover,
			request: func(spec *bloodravenv1alpha1.MysqlFailoverGroupSpec) (string, bool) {
				if pf := spec.PlannedFailover; pf != nil {
					return pf.ID, true
				}
				return "", false
			},
			reconcile: (*GroupReconciler).reconcilePlannedFailover,
			promoting: bloodravenv1alpha1.PhasePromoting, promoted: bloodravenv1alpha1.PhaseCompleted, promotedReason: "Promoted",
		},
		{
			name: bloodravenv1alpha1.OperationOrderedUpdate,
			request: func(spec *bloodravenv1alpha1.MysqlFailoverGroupSpec) (string, bool) {
				return spec.UpdateRevision, spec.UpdateRevision != ""
			},
			reconcile: (*GroupReconciler).reconcileOrderedUpdate,
			promoting: bloodravenv1alpha1.PhaseFailingOver, promoted: bloodravenv1alpha1.PhaseUpdatingFormerPrimary,
		},
		{
			name: bloodravenv1alpha1.OperationRestoreInPlace,
			request: func(spec *bloodravenv1alpha1.MysqlFailoverGroupSpec) (string, bool) {
				if rp := spec.RestoreInPlace; rp != nil {
					return rp.ID, true
				}
				return "", false
			},
			reconcile: (*GroupReconciler).reconcileRestoreInPlace,
			promoting: bloodravenv1alpha1.PhasePromoting, promoted: bloodravenv1alpha1.PhaseCompleted,
		},
	}
}

// operationOf is the table's entry of name; false for an operation that is
// not planned (Bootstrap, EmergencyFailover).
func operationOf(name bloodravenv1alpha1.OperationName) (operation, bool) {
	for _, op := range operations() {
		if op.name == name {
			return op, true
		}
	}
	return operation{}, false
}

// reconcileOperations releases a reservation whose request is gone, then
// runs each planned operation, one file each.
func (r *GroupReconciler) reconcileOperations(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, sites []topology.SiteState, st *passOutcome) error {
	r.withdrawRemovedRequests(g)
	for _, op := range operations() {
		if err := op.reconcile(r, ctx, g, sites, st); err != nil {
			return err
		}
	}
	return nil
}

// requests lists the planned operations the spec asks for.
func requests(g *bloodravenv1alpha1.MysqlFailoverGroup) []policy.Request {
	var out []policy.Request
	for _, op := range operations() {
		if id, ok := op.request(&g.Spec); ok {
			out = append(out, policy.Request{Operation: op.name, ID: id})
		}
	}
	return out
}

// withdrawRemovedRequests ends what a removed or replaced request left
// behind: its reservation (so holds are granted again) and its in-flight
// phase, which becomes Failed/RequestWithdrawn. A transition already under
// way is left to the safety paths, which complete it or roll it back.
func (r *GroupReconciler) withdrawRemovedRequests(g *bloodravenv1alpha1.MysqlFailoverGroup) {
	var transitionOp bloodravenv1alpha1.OperationName
	if t := g.Status.Transition; t != nil {
		transitionOp = t.Operation
	}
	reqs := requests(g)
	if res := g.Status.Reservation; res != nil && !policy.ReservationStands(policy.Request{Operation: res.Operation, ID: res.ID}, reqs, transitionOp) {
		g.Status.Reservation = nil
		r.failOperation(g, res.Operation, "RequestWithdrawn")
	}
	for _, op := range operations() {
		s := g.Status.Operation(op.name, &g.Spec)
		if s.Active() && transitionOp != op.name && !policy.ReservationStands(policy.Request{Operation: op.name, ID: s.ID}, reqs, "") {
			r.failOperation(g, op.name, "RequestWithdrawn")
		}
	}
}

// failOperation marks name's in-flight phase Failed with reason, releases
// its reservation, and emits OperationFailed when a phase changed.
func (r *GroupReconciler) failOperation(g *bloodravenv1alpha1.MysqlFailoverGroup, name bloodravenv1alpha1.OperationName, reason string) {
	r.releaseReservation(g, name)
	s := g.Status.Operation(name, &g.Spec)
	if !s.Active() {
		return
	}
	s.Phase, s.Reason, s.Admission = bloodravenv1alpha1.PhaseFailed, reason, nil
	g.Status.SetOperation(s)
	EventOperationFailed.emit(r.Recorder, g, name, s.ID, reason)
}

// advanceOperation moves the operation that asked for a completed
// transition past its promotion, so the phase and the generation bump are
// persisted together: a planned failover or restore-in-place completes (its
// ID is returned for the Event, and its reservation released), an ordered
// update goes on to update the former primary.
func (r *GroupReconciler) advanceOperation(g *bloodravenv1alpha1.MysqlFailoverGroup, name bloodravenv1alpha1.OperationName) (completedID string) {
	op, ok := operationOf(name)
	if !ok {
		return ""
	}
	s := g.Status.Operation(name, &g.Spec)
	if s.Phase != op.promoting {
		return ""
	}
	s.Phase, s.Reason, s.Admission = op.promoted, op.promotedReason, nil
	g.Status.SetOperation(s)
	held, why := policy.AutomaticFailoverHeld(g.Status.PlannedFailover)
	setCondition(g, bloodravenv1alpha1.ConditionAutomaticFailoverHeld, held, why, "", r.now())
	if s.Phase != bloodravenv1alpha1.PhaseCompleted {
		return ""
	}
	r.releaseReservation(g, name)
	return s.ID
}

// setPhase records an operation's phase, with a reason and an admission
// where its status has room for them (the planned failover's).
func setPhase(g *bloodravenv1alpha1.MysqlFailoverGroup, name bloodravenv1alpha1.OperationName, phase bloodravenv1alpha1.OperationPhase, reason string, adm *bloodravenv1alpha1.Admission) {
	s := g.Status.Operation(name, &g.Spec)
	s.Phase, s.Reason, s.Admission = phase, reason, adm
	g.Status.SetOperation(s)
}
