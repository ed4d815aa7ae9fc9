package controllers

import (
	"context"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/topology"
)

// reconcilePlannedFailover runs spec.plannedFailover: Admitting → (Deferred
// behind a live hold) → Promoting → Completed, or Failed. policy decides the
// step; the switch acts.
func (r *GroupReconciler) reconcilePlannedFailover(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, sites []topology.SiteState, st *passOutcome) error {
	req := g.Spec.PlannedFailover
	if req == nil {
		return nil
	}
	// Always through g: a status write replaces g.Status with the server's copy.
	pf := func() *bloodravenv1alpha1.PlannedFailoverStatus { return g.Status.PlannedFailover }
	if pf() == nil || pf().ID != req.ID {
		g.Status.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverStatus{ID: req.ID, TargetSite: req.TargetSite, Phase: bloodravenv1alpha1.PlannedFailoverPhaseAdmitting}
	}
	target := pf().TargetSite
	passOutcome := policy.NextPlannedFailoverStep(policy.PlannedFailoverInput{Requested: true, Phase: pf().Phase, Target: target,
		ActiveSite: g.Status.ActiveSite, Transition: g.Status.Transition != nil, Reserved: g.Status.Reservation != nil})
	switch passOutcome {
	case policy.StepNone, policy.StepWaitTransition:
		return nil
	case policy.StepWaitBootstrap:
		pf().Phase, pf().Reason = bloodravenv1alpha1.PlannedFailoverPhaseAdmitting, "NotBootstrapped"
		st.after(waitRetry)
		return nil
	case policy.StepComplete:
		reason := "AlreadyActive"
		if pf().Phase == bloodravenv1alpha1.PlannedFailoverPhasePromoting {
			reason = "Promoted"
		}
		return r.completePlanned(ctx, g, reason)
	case policy.StepPromote:
		return r.promote(ctx, g, bloodravenv1alpha1.OperationPlannedFailover, target)
	}
	// StepAdmit
	ok, err := r.admitPlanned(ctx, g, sites, st, plannedRequest{op: bloodravenv1alpha1.OperationPlannedFailover, id: req.ID, target: target})
	if err != nil || !ok {
		return err
	}
	if ok, reason, msg := r.fenceOthers(ctx, g, sites, bloodravenv1alpha1.OperationPlannedFailover, req.ID, target, st); !ok {
		r.plannedWaits(g, reason, msg)
		return nil
	}
	pf().Phase, pf().Reason, pf().Admission = bloodravenv1alpha1.PlannedFailoverPhasePromoting, "", nil
	held, reason := policy.AutomaticFailoverHeld(pf())
	setCondition(g, bloodravenv1alpha1.ConditionAutomaticFailoverHeld, held, reason, "planned failover "+req.ID+" is moving the primary", r.now())
	return r.promote(ctx, g, bloodravenv1alpha1.OperationPlannedFailover, target)
}

// plannedWaits returns the planned failover to Admitting, waiting for its
// sites with reason and msg, its reservation released: after a fence that
// failed before its transition was written (fenceOthers), and after its
// transition was rolled back because a site could not be fenced
// (readmitOperation). It then holds nothing: not the emergency path, and no
// hold grant.
func (r *GroupReconciler) plannedWaits(g *bloodravenv1alpha1.MysqlFailoverGroup, reason, msg string) {
	pf := g.Status.PlannedFailover
	if pf == nil {
		return
	}
	r.releaseReservation(g, bloodravenv1alpha1.OperationPlannedFailover)
	pf.Phase, pf.Reason, pf.Admission = bloodravenv1alpha1.PlannedFailoverPhaseAdmitting, reason, &bloodravenv1alpha1.Admission{Message: msg}
	held, why := policy.AutomaticFailoverHeld(pf)
	setCondition(g, bloodravenv1alpha1.ConditionAutomaticFailoverHeld, held, why, "", r.now())
}

func (r *GroupReconciler) completePlanned(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, reason string) error {
	pf := g.Status.PlannedFailover
	pf.Phase, pf.Reason, pf.Admission = bloodravenv1alpha1.PlannedFailoverPhaseCompleted, reason, nil
	r.releaseReservation(g, bloodravenv1alpha1.OperationPlannedFailover)
	held, why := policy.AutomaticFailoverHeld(pf)
	setCondition(g, bloodravenv1alpha1.ConditionAutomaticFailoverHeld, held, why, "", r.now())
	if err := r.writeStatus(ctx, g); err != nil {
		return err
	}
	EventOperationCompleted.emit(r.Recorder, g, bloodravenv1alpha1.OperationPlannedFailover, pf.ID)
	return nil
}
