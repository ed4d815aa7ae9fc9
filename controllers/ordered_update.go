package controllers

import (
	"context"
	"fmt"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/topology"
)

// reconcileOrderedUpdate runs spec.updateRevision: Admitting → (Deferred) →
// UpdatingReplicas → FailingOver → UpdatingFormerPrimary → Completed.
// policy decides each step; the switch acts and persists the progress.
func (r *GroupReconciler) reconcileOrderedUpdate(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, sites []topology.SiteState, st *passOutcome) error {
	rev := g.Spec.UpdateRevision
	for i := 0; i < 5; i++ {
		passOutcome := policy.NextOrderedUpdateStep(policy.OrderedUpdateInput{Revision: rev, UpdatedRevision: g.Status.UpdatedRevision,
			ActiveSite: g.Status.ActiveSite, Phase: g.Status.UpdatePhase, Transition: g.Status.Transition != nil})
		switch passOutcome {
		case policy.StepNone, policy.StepWaitTransition:
			return nil
		case policy.StepAdmit:
			target := policy.BestSite(sites, g.Status.ActiveSite)
			if target == "" {
				target = g.Status.ActiveSite
			}
			ok, err := r.admitPlanned(ctx, g, sites, st, plannedRequest{op: bloodravenv1alpha1.OperationOrderedUpdate, id: rev, target: target})
			if err != nil || !ok {
				return err
			}
			g.Status.UpdatePhase = bloodravenv1alpha1.PhaseUpdatingReplicas
		case policy.StepUpdateReplicas:
			for _, s := range g.Spec.Sites {
				if s.Name == g.Status.ActiveSite {
					continue
				}
				if err := r.driver().UpdateSite(ctx, g, s.Name, rev); err != nil {
					return fmt.Errorf("ordered update: %w", err)
				}
			}
			g.Status.UpdatePhase = bloodravenv1alpha1.PhaseFailingOver
			if len(g.Spec.Sites) == 1 {
				g.Status.UpdatePhase = bloodravenv1alpha1.PhaseUpdatingFormerPrimary
			}
		case policy.StepPromote:
			target := policy.BestSite(sites, g.Status.ActiveSite)
			// The update keeps its reservation while it waits; no transition
			// is written until every other site is fenced and confirmed.
			if ok, _, _ := r.fenceOthers(ctx, g, sites, bloodravenv1alpha1.OperationOrderedUpdate, rev, target, st); !ok {
				return nil
			}
			// On success the phase moves to UpdatingFormerPrimary in the same
			// status write as the generation bump.
			if err := r.promote(ctx, g, bloodravenv1alpha1.OperationOrderedUpdate, target); err != nil {
				return err
			}
			continue
		case policy.StepUpdateAll:
			for _, s := range g.Spec.Sites {
				if err := r.driver().UpdateSite(ctx, g, s.Name, rev); err != nil {
					return fmt.Errorf("ordered update: %w", err)
				}
			}
			g.Status.UpdatePhase, g.Status.UpdatedRevision = bloodravenv1alpha1.PhaseCompleted, rev
			r.releaseReservation(g, bloodravenv1alpha1.OperationOrderedUpdate)
			if err := r.writeStatus(ctx, g); err != nil {
				return err
			}
			EventOperationCompleted.emit(r.Recorder, g, bloodravenv1alpha1.OperationOrderedUpdate, rev)
			return nil
		default:
			return fmt.Errorf("unknown update phase %q", g.Status.UpdatePhase)
		}
		if err := r.writeStatus(ctx, g); err != nil {
			return err
		}
	}
	return nil
}
