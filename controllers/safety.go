package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/topology"
)

// reconcileSafety takes the safety paths. It never reads a deployment
// lease: policy.DecideSafety has no lease input. It reports whether it
// changed the data plane or the fence.
func (r *GroupReconciler) reconcileSafety(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, sites []topology.SiteState, st *passOutcome) (bool, error) {
	budget := time.Duration(g.Spec.FailureDetectionSeconds) * time.Second
	if budget <= 0 {
		budget = 30 * time.Second
	}
	in := policy.SafetyInput{
		Now: r.Clock.Now(), ActiveSite: g.Status.ActiveSite,
		Budget: budget, PromoteTimeout: r.promoteTimeout(), Sites: sites,
	}
	if l := g.Status.PrimaryLostAt; l != nil {
		in.PrimaryLostAt = l.Time
	}
	if r.Prober != nil && g.Status.ActiveSite != "" {
		in.ActiveUnreachableSince = r.Prober.DeadSince(g, g.Status.ActiveSite)
	}
	if t := g.Status.Transition; t != nil {
		pt := transitionInput(t)
		in.Transition = &pt
	}
	d := policy.DecideSafety(in)
	st.after(d.RequeueAfter)
	// An emergency promotion (or bootstrap) does not dial the sites this
	// reconcile's probe found unreachable: a hung one would hold the worker
	// for its timeout. The driver rejoins them when they answer; a planned
	// promotion ignores the hint and fences every site.
	var dead []string
	for _, s := range sites {
		if !s.Reachable {
			dead = append(dead, s.Name)
		}
	}
	ctx = topology.WithSkipped(ctx, dead...)
	switch d.Action {
	case policy.ActionResume:
		return true, r.promote(ctx, g, g.Status.Transition.Operation, d.Site)
	case policy.ActionRollBack:
		return true, r.rollBack(ctx, g, d)
	case policy.ActionBootstrap:
		return true, r.promote(ctx, g, bloodravenv1alpha1.OperationBootstrap, d.Site)
	case policy.ActionFence:
		if err := r.driver().Fence(ctx, g, d.Site); err != nil {
			return false, fmt.Errorf("fence site %s: %w", d.Site, err)
		}
		EventSiteFenced.emit(r.Recorder, g, d.Site, d.Reason)
		return true, nil
	case policy.ActionMarkLost:
		// Written with this reconcile's observation (step 4), in one status
		// update: a lost site of a fleet costs one write per group less. If
		// the reconcile fails before that write, the next one marks the loss
		// again, from the same first failed probe or later. The policy
		// rounds the time up to the second the field keeps: truncated, it
		// would start the budget up to a second before the failure was seen.
		lostAt := metav1.NewTime(d.LostAt)
		g.Status.PrimaryLostAt = &lostAt
		return false, nil
	case policy.ActionClearLost:
		g.Status.PrimaryLostAt = nil
		return false, nil
	case policy.ActionEmergencyPromote:
		EventEmergencyFailover.emit(r.Recorder, g, g.Status.ActiveSite, budget, d.Site)
		return true, r.promote(ctx, g, bloodravenv1alpha1.OperationEmergencyFailover, d.Site)
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
	if t := g.Status.Transition; t != nil && d.Reason != "" {
		st.degraded = "TransitionWaiting: " + d.Reason
		if t.Failures > 0 || t.FailingSince != nil { // the target is away: its failures start over when it returns
			t.Failures, t.FailingSince = 0, nil
			return false, r.writeStatus(ctx, g)
		}
	}
	return false, nil
}

// transitionInput is what policy needs of status.transition.
func transitionInput(t *bloodravenv1alpha1.TopologyTransition) policy.Transition {
	pt := policy.Transition{TargetSite: t.TargetSite, StartedAt: t.StartedAt.Time, Failures: t.Failures,
		Bootstrap: t.Operation == bloodravenv1alpha1.OperationBootstrap, Planned: plannedTransition(t.Operation)}
	if t.FailingSince != nil {
		pt.FailingSince = t.FailingSince.Time
	}
	return pt
}

// plannedTransition tells whether op's promotion is a planned one: it fences
// and confirms every other site first, and skips none.
func plannedTransition(op bloodravenv1alpha1.OperationName) bool {
	return op != bloodravenv1alpha1.OperationEmergencyFailover && op != bloodravenv1alpha1.OperationBootstrap
}

// promote is the one way the active site changes. It announces the change in
// status.transition (the deployment API answers 423 from then on), acts on
// the data plane, then writes activeSite and topologyGeneration+1 in one
// status update, clears the transition, and revokes the leases the new
// generation fences. Re-entered after a crash, it resumes from the
// persisted transition; Driver.Promote is idempotent. A failed attempt is
// decided on at once (policy.DecidePromoteFailure): a planned one that could
// not fence another site is rolled back in the same reconcile; any other is
// counted in the transition, so policy.DecideSafety can roll it back.
func (r *GroupReconciler) promote(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, op bloodravenv1alpha1.OperationName, target string) error {
	if g.Status.Transition == nil {
		g.Status.Transition = &bloodravenv1alpha1.TopologyTransition{Operation: op, TargetSite: target,
			Generation: g.Status.TopologyGeneration + 1, StartedAt: r.now()}
		if err := r.writeStatus(ctx, g); err != nil {
			return err
		}
	}
	t := *g.Status.Transition
	// A planned promotion (every attempt, a resumed one included) fences
	// and confirms every other site inside Driver.Promote and fails on one
	// it cannot reach.
	if err := r.driver().Promote(ctx, g, t.TargetSite, t.Generation, plannedTransition(t.Operation)); err != nil {
		return r.promoteFailed(ctx, g, fmt.Errorf("%s: promote %s: %w", t.Operation, t.TargetSite, err))
	}
	g.Status.ActiveSite = t.TargetSite
	g.Status.TopologyGeneration = t.Generation
	g.Status.TopologyGenerationTime = microTime(r.Clock.Now()) // when the topology moved: the fence's time
	g.Status.Transition = nil
	g.Status.PrimaryLostAt = nil
	completed := r.advanceOperation(g, t.Operation) // in the same write as the bump
	if err := r.writeStatus(ctx, g); err != nil {
		return err
	}
	if t.Operation == bloodravenv1alpha1.OperationBootstrap {
		EventBootstrapped.emit(r.Recorder, g, t.TargetSite, t.Generation)
	} else {
		EventPromoted.emit(r.Recorder, g, t.Operation, t.TargetSite, t.Generation)
	}
	if completed != "" {
		EventOperationCompleted.emit(r.Recorder, g, t.Operation, completed)
	}
	r.reconcileLeases(ctx, g, nil, promotionPass) // revoke what the new generation fenced; the history follows on the next pass
	return nil
}

// promoteFailed records the failed attempt err in the transition and asks
// policy what it leads to. A planned transition that could not fence and
// confirm another site (a topology.UnreachableError naming it) is rolled
// back now: a planned operation never waits inside a persisted transition,
// where it would hold emergency failover. If that rollback cannot fence the
// target, the failure is recorded and the transition stays. Otherwise the
// failure is persisted and returned.
func (r *GroupReconciler) promoteFailed(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, err error) error {
	tr := g.Status.Transition
	if tr.FailingSince == nil {
		now := r.now()
		tr.FailingSince = &now
	}
	tr.Failures++
	tr.LastError = err.Error()
	var unfenced string
	if ue := (*topology.UnreachableError)(nil); errors.As(err, &ue) {
		unfenced = ue.Site
	}
	if d := policy.DecidePromoteFailure(transitionInput(tr), unfenced); d.Action == policy.ActionRollBack {
		rerr := r.rollBack(ctx, g, d) // one status write: the failure is in the Event
		if rerr == nil {
			return nil
		}
		if g.Status.Transition == nil { // fenced, but the write failed: the next reconcile decides again
			return rerr
		}
		err = fmt.Errorf("%w (and rolling back: %w)", err, rerr)
	}
	if werr := r.writeStatus(ctx, g); werr != nil {
		return fmt.Errorf("%w (and recording the failure: %w)", err, werr)
	}
	return err
}

// rollBack gives up a transition (d.Action is policy.ActionRollBack). The
// target is fenced read-only first: if that fails, the transition stays and
// nothing is reopened. Only then is the transition cleared, so the safety
// paths may reassert the old primary, or, if it is lost, promote past it
// after the detection budget. The operation that asked for it fails or,
// with d.Readmit (a planned transition that could not fence another site),
// waits for its sites again. The generation does not move: no site became
// authoritative.
func (r *GroupReconciler) rollBack(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, d policy.SafetyDecision) error {
	t := *g.Status.Transition
	if err := r.driver().Fence(ctx, g, t.TargetSite); err != nil {
		return fmt.Errorf("roll back %s: fence target %s: %w", t.Operation, t.TargetSite, err)
	}
	// The transition may have recorded its fence row on some sites before
	// it failed: put the confirmed topology's back, so the move that never
	// completed is not taken for a newer one (topology.FenceRecorder).
	if fr, ok := r.driver().(topology.FenceRecorder); ok && g.Status.ActiveSite != "" {
		if err := fr.UndoTransition(ctx, g, t.Generation, t.TargetSite, g.Status.TopologyGeneration, g.Status.ActiveSite); err != nil {
			return fmt.Errorf("roll back %s: %w", t.Operation, err)
		}
	}
	g.Status.Transition = nil
	if d.Readmit {
		r.readmitOperation(g, t.Operation, d.Reason)
	} else {
		r.failOperation(g, t.Operation, "PromotionRolledBack")
	}
	if err := r.writeStatus(ctx, g); err != nil {
		return err
	}
	EventTransitionRolledBack.emit(r.Recorder, g, t.Operation, t.TargetSite, d.Reason+"; last error: "+t.LastError)
	return nil
}

// readmitOperation returns the operation whose planned transition was rolled
// back to wait for its sites, where a fence that fails before its transition
// is written leaves it (controllers.fenceOthers): a planned failover goes
// back to Admitting, reason policy.WaitSiteUnreachable, msg its message,
// its reservation released. An ordered update (FailingOver) and a
// restore-in-place (Promoting) already are in the phase in which they fence
// the other sites before they write a transition, and keep their
// reservation while they wait.
func (r *GroupReconciler) readmitOperation(g *bloodravenv1alpha1.MysqlFailoverGroup, name bloodravenv1alpha1.OperationName, msg string) {
	if name == bloodravenv1alpha1.OperationPlannedFailover {
		r.plannedWaits(g, policy.WaitSiteUnreachable, msg)
	}
}
