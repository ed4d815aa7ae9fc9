package controllers

import (
	"context"
	"fmt"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/topology"
)

// reconcileOrderedUpdate runs spec.updateRevision: Admitting → (Deferred) →
// UpdatingReplicas → FailingOver → UpdatingFormerPrimary → Completed. Each
// phase persists its progress before the next.
func (r *GroupReconciler) reconcileOrderedUpdate(ctx context.Context, g *v1.MysqlFailoverGroup, sites []topology.SiteState, st *step) error {
	rev := g.Spec.UpdateRevision
	if rev == "" || rev == g.Status.UpdatedRevision || g.Status.ActiveSite == "" {
		return nil
	}
	for i := 0; i < 5; i++ {
		switch g.Status.UpdatePhase {
		case v1.PhaseNone, v1.PhaseCompleted, v1.PhaseFailed, v1.PhaseAdmitting, v1.PhaseDeferred:
			target := policy.BestSite(sites, g.Status.ActiveSite)
			if target == "" {
				target = g.Status.ActiveSite
			}
			ok, err := r.gate(ctx, g, sites, st, gated{op: OpOrderedUpdate, id: rev, target: target,
				wasDeferred: g.Status.UpdatePhase == v1.PhaseDeferred,
				deferred:    func(policy.Admission) { g.Status.UpdatePhase = v1.PhaseDeferred },
				waiting:     func(string) { g.Status.UpdatePhase = v1.PhaseAdmitting },
			})
			if err != nil || !ok {
				return err
			}
			g.Status.UpdatePhase = v1.PhaseUpdatingReplicas
		case v1.PhaseUpdatingReplicas:
			for _, s := range g.Spec.Sites {
				if s.Name == g.Status.ActiveSite {
					continue
				}
				if err := r.driver().UpdateSite(ctx, g, s.Name, rev); err != nil {
					return fmt.Errorf("ordered update: %w", err)
				}
			}
			g.Status.UpdatePhase = v1.PhaseFailingOver
			if len(g.Spec.Sites) == 1 {
				g.Status.UpdatePhase = v1.PhaseUpdatingFormerPrimary
			}
		case v1.PhaseFailingOver:
			if g.Status.Transition != nil {
				return nil // the safety paths complete it (and advance this phase) or roll it back
			}
			target := policy.BestSite(sites, g.Status.ActiveSite)
			if ready, _ := policy.SiteReady(sites, target, g.Status.ActiveSite); target == "" || !ready {
				st.after(waitRetry)
				return nil
			}
			if err := r.promote(ctx, g, OpOrderedUpdate, target); err != nil {
				return err
			}
		case v1.PhaseUpdatingFormerPrimary:
			for _, s := range g.Spec.Sites {
				if err := r.driver().UpdateSite(ctx, g, s.Name, rev); err != nil {
					return fmt.Errorf("ordered update: %w", err)
				}
			}
			g.Status.UpdatePhase, g.Status.UpdatedRevision = v1.PhaseCompleted, rev
			r.releaseReservation(g, OpOrderedUpdate)
			if err := r.writeStatus(ctx, g); err != nil {
				return err
			}
			EventOperationCompleted.emit(r.Recorder, g, OpOrderedUpdate, rev)
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
