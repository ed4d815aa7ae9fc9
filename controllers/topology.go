package controllers

import (
	"context"
	"fmt"
	"time"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/topology"
)

// Operations that move the primary, as recorded in status.transition.
const (
	OpBootstrap         = "Bootstrap"
	OpPlannedFailover   = "PlannedFailover"
	OpEmergencyFailover = "EmergencyFailover"
	OpOrderedUpdate     = "OrderedUpdate"
	OpRestoreInPlace    = "RestoreInPlace"
)

// reconcileTopology takes the safety paths. It never reads a deployment
// lease: policy.DecideTopology has no lease input. It reports whether it
// changed the data plane.
func (r *GroupReconciler) reconcileTopology(ctx context.Context, g *v1.MysqlFailoverGroup, sites []topology.SiteState, st *step) (bool, error) {
	budget := time.Duration(g.Spec.FailureDetectionSeconds) * time.Second
	if budget <= 0 {
		budget = 30 * time.Second
	}
	d := policy.DecideTopology(policy.TopologyInput{
		Now: r.Clock.Now(), ActiveSite: g.Status.ActiveSite, Transition: g.Status.Transition != nil,
		PrimaryLostAt: g.Status.PrimaryLostAt, Budget: budget, Sites: sites,
	})
	st.after(d.RequeueAfter)
	switch d.Action {
	case policy.ActionResume:
		t := g.Status.Transition
		if !reachable(sites, t.TargetSite) {
			return true, r.abandonTransition(ctx, g)
		}
		return true, r.promote(ctx, g, t.Operation, t.TargetSite)
	case policy.ActionBootstrap:
		return true, r.promote(ctx, g, OpBootstrap, d.Site)
	case policy.ActionFence:
		if err := r.driver().Fence(ctx, g, d.Site); err != nil {
			return false, fmt.Errorf("fence site %s: %w", d.Site, err)
		}
		EventSiteFenced.emit(r.Recorder, g, d.Site, d.Reason)
		return true, nil
	case policy.ActionMarkLost:
		now := r.now()
		g.Status.PrimaryLostAt = &now
		return false, r.writeStatus(ctx, g)
	case policy.ActionClearLost:
		g.Status.PrimaryLostAt = nil
		return false, r.writeStatus(ctx, g)
	case policy.ActionEmergencyPromote:
		EventEmergencyFailover.emit(r.Recorder, g, g.Status.ActiveSite, budget, d.Site)
		return true, r.promote(ctx, g, OpEmergencyFailover, d.Site)
	case policy.ActionRejoin:
		rj, ok := r.driver().(topology.Rejoiner)
		if !ok {
			return false, nil
		}
		if err := rj.Rejoin(ctx, g, d.Site, g.Status.ActiveSite); err != nil {
			// Left fenced (read-only): report it; the probe keeps it Degraded.
			st.degraded = fmt.Sprintf("SiteFenced: site %s stays read-only: %v", d.Site, err)
			EventSiteFenced.emit(r.Recorder, g, d.Site, st.degraded)
			return false, nil
		}
		return true, nil
	case policy.ActionReassert:
		if err := r.driver().Promote(ctx, g, d.Site, g.Status.TopologyGeneration, false); err != nil {
			return false, fmt.Errorf("reassert primary %s: %w", d.Site, err)
		}
		return true, nil
	}
	return false, nil
}

// promote is the one way the active site changes. It announces the change in
// status.transition (the deployment API answers 423 from then on), acts on
// the data plane, then writes activeSite and topologyGeneration+1 in one
// status update, clears the transition, and revokes the leases the new
// generation fences. Re-entered after a crash, it resumes from the
// persisted transition; Driver.Promote is idempotent.
func (r *GroupReconciler) promote(ctx context.Context, g *v1.MysqlFailoverGroup, op, target string) error {
	if g.Status.Transition == nil {
		g.Status.Transition = &v1.TopologyTransition{Operation: op, TargetSite: target,
			Generation: g.Status.TopologyGeneration + 1, StartedAt: r.now()}
		if err := r.writeStatus(ctx, g); err != nil {
			return err
		}
	}
	t := g.Status.Transition
	if err := r.driver().Promote(ctx, g, t.TargetSite, t.Generation, t.Operation != OpEmergencyFailover && t.Operation != OpBootstrap); err != nil {
		return fmt.Errorf("%s: promote %s: %w", t.Operation, t.TargetSite, err)
	}
	g.Status.ActiveSite = t.TargetSite
	g.Status.TopologyGeneration = t.Generation
	g.Status.Transition = nil
	g.Status.PrimaryLostAt = nil
	if err := r.writeStatus(ctx, g); err != nil {
		return err
	}
	if t.Operation == OpBootstrap {
		EventBootstrapped.emit(r.Recorder, g, t.TargetSite, t.Generation)
	} else {
		EventPromoted.emit(r.Recorder, g, t.Operation, t.TargetSite, t.Generation)
	}
	return r.revokeStale(ctx, g)
}

func reachable(sites []topology.SiteState, name string) bool {
	for _, s := range sites {
		if s.Name == name {
			return s.Reachable
		}
	}
	return false
}

// abandonTransition gives up a promotion whose target became unreachable
// before it was confirmed: the active site and generation stay as they were
// (nothing authoritative changed), the operation that asked for it fails,
// and the safety paths decide again on the next probe.
func (r *GroupReconciler) abandonTransition(ctx context.Context, g *v1.MysqlFailoverGroup) error {
	t := g.Status.Transition
	g.Status.Transition = nil
	switch t.Operation {
	case OpPlannedFailover:
		if ps := g.Status.PlannedFailover; ps != nil {
			ps.Phase, ps.Reason = v1.PlannedFailoverPhaseFailed, "TargetUnreachable"
		}
	case OpOrderedUpdate:
		g.Status.UpdatePhase = PhaseFailed
	case OpRestoreInPlace:
		g.Status.RestoreInPlace = PhaseFailed
	}
	r.releaseReservation(g, t.Operation)
	return r.writeStatus(ctx, g)
}
