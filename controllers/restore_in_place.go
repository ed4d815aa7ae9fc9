package controllers

import (
	"context"
	"fmt"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/topology"
)

// reconcileRestoreInPlace runs spec.restoreInPlace: Admitting → (Deferred)
// → Restoring → Promoting → Completed.
func (r *GroupReconciler) reconcileRestoreInPlace(ctx context.Context, g *v1.MysqlFailoverGroup, sites []topology.SiteState, st *step) error {
	req := g.Spec.RestoreInPlace
	if req == nil || g.Status.ActiveSite == "" {
		return nil
	}
	if g.Status.RestoreInPlaceID != req.ID {
		g.Status.RestoreInPlaceID, g.Status.RestoreInPlace = req.ID, v1.PhaseAdmitting
	}
	target := req.TargetSite
	if target == "" {
		target = g.Status.ActiveSite
	}
	for i := 0; i < 4; i++ {
		switch g.Status.RestoreInPlace {
		case v1.PhaseCompleted, v1.PhaseFailed:
			return nil
		case v1.PhaseNone, v1.PhaseAdmitting, v1.PhaseDeferred:
			ok, err := r.gate(ctx, g, sites, st, gated{op: OpRestoreInPlace, id: req.ID, target: target,
				wasDeferred: g.Status.RestoreInPlace == v1.PhaseDeferred,
				deferred:    func(policy.Admission) { g.Status.RestoreInPlace = v1.PhaseDeferred },
				waiting:     func(string) { g.Status.RestoreInPlace = v1.PhaseAdmitting },
			})
			if err != nil || !ok {
				return err
			}
			g.Status.RestoreInPlace = v1.PhaseRestoring
		case v1.PhaseRestoring:
			if err := r.driver().RestoreSite(ctx, g, target, req.ID); err != nil {
				return fmt.Errorf("restore in place: %w", err)
			}
			g.Status.RestoreInPlace = v1.PhasePromoting
		case v1.PhasePromoting:
			if g.Status.Transition != nil {
				return nil // the safety paths complete it (and this operation) or roll it back
			}
			return r.promote(ctx, g, OpRestoreInPlace, target)
		default:
			return fmt.Errorf("unknown restore phase %q", g.Status.RestoreInPlace)
		}
		if err := r.writeStatus(ctx, g); err != nil {
			return err
		}
	}
	return nil
}
