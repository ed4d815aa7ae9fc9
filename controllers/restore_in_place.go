package controllers

import (
	"context"
	"fmt"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/topology"
)

// reconcileRestoreInPlace runs spec.restoreInPlace: Admitting → (Deferred)
// → Restoring → Promoting → Completed. policy decides each step; the switch
// acts and persists the progress.
func (r *GroupReconciler) reconcileRestoreInPlace(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, sites []topology.SiteState, st *passOutcome) error {
	req := g.Spec.RestoreInPlace
	if req != nil && g.Status.ActiveSite != "" && g.Status.RestoreInPlaceID != req.ID {
		g.Status.RestoreInPlaceID, g.Status.RestoreInPlace = req.ID, bloodravenv1alpha1.PhaseAdmitting
	}
	for i := 0; i < 4; i++ {
		passOutcome := policy.NextRestoreInPlaceStep(policy.RestoreInPlaceInput{Requested: req != nil, ActiveSite: g.Status.ActiveSite,
			Phase: g.Status.RestoreInPlace, Transition: g.Status.Transition != nil})
		if passOutcome == policy.StepNone || passOutcome == policy.StepWaitTransition {
			return nil
		}
		target := req.TargetSite
		if target == "" {
			target = g.Status.ActiveSite
		}
		switch passOutcome {
		case policy.StepAdmit:
			ok, err := r.admitPlanned(ctx, g, sites, st, plannedRequest{op: bloodravenv1alpha1.OperationRestoreInPlace, id: req.ID, target: target})
			if err != nil || !ok {
				return err
			}
			g.Status.RestoreInPlace = bloodravenv1alpha1.PhaseRestoring
		case policy.StepRestore:
			if err := r.driver().RestoreSite(ctx, g, target, req.ID); err != nil {
				return fmt.Errorf("restore in place: %w", err)
			}
			g.Status.RestoreInPlace = bloodravenv1alpha1.PhasePromoting
		case policy.StepPromote:
			// No transition is written until every other site is fenced and
			// confirmed; the restore keeps its reservation while it waits.
			if ok, _, _ := r.fenceOthers(ctx, g, sites, bloodravenv1alpha1.OperationRestoreInPlace, req.ID, target, st); !ok {
				return nil
			}
			// On success the phase becomes Completed in the same status write
			// as the generation bump.
			return r.promote(ctx, g, bloodravenv1alpha1.OperationRestoreInPlace, target)
		default:
			return fmt.Errorf("unknown restore phase %q", g.Status.RestoreInPlace)
		}
		if err := r.writeStatus(ctx, g); err != nil {
			return err
		}
	}
	return nil
}
