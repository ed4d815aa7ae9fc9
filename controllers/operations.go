package controllers

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/topology"
)

// Phases of ordered updates and restores-in-place (status.updatePhase,
// status.restoreInPlace).
const (
	PhaseAdmitting             = "Admitting"
	PhaseDeferred              = "Deferred"
	PhaseUpdatingReplicas      = "UpdatingReplicas"
	PhaseFailingOver           = "FailingOver"
	PhaseUpdatingFormerPrimary = "UpdatingFormerPrimary"
	PhaseRestoring             = "Restoring"
	PhasePromoting             = "Promoting"
	PhaseCompleted             = "Completed"
	PhaseFailed                = "Failed"
)

// waitRetry is how soon a waiting operation looks again.
const waitRetry = 5 * time.Second

// gated is what the admission gate needs to know about one operation.
type gated struct {
	op, id, target string
	// deferred records a deferral in status; entering is true when the
	// operation was not deferred before.
	deferred    func(adm policy.Admission)
	wasDeferred bool
	// waiting records why the operation cannot be admitted yet.
	waiting func(msg string)
}

// gate admits a planned operation. It returns true once the operation holds
// a persisted reservation and no live failover-hold exists after it was
// written: the deployment API refuses holds with 423 while a reservation
// stands and re-checks the reservation after writing a new hold, so of a hold
// and an admission racing, at least one sees the other and never both
// proceed.
func (r *GroupReconciler) gate(ctx context.Context, g *v1.MysqlFailoverGroup, sites []topology.SiteState, st *step, o gated) (bool, error) {
	if res := g.Status.Reservation; res != nil && (res.Operation != o.op || res.ID != o.id) {
		o.waiting(fmt.Sprintf("waiting for %s %s to finish", res.Operation, res.ID))
		st.after(waitRetry)
		return false, nil
	}
	adm, err := r.admit(ctx, g, sites, o.target)
	if err != nil {
		return false, err
	}
	if adm.Verdict == policy.Admitted && g.Status.Reservation == nil {
		g.Status.Reservation = &v1.OperationReservation{Operation: o.op, ID: o.id, ReservedAt: r.now()}
		if err := r.writeStatus(ctx, g); err != nil {
			return false, err
		}
		// Re-check after the reservation is persisted.
		if adm, err = r.admit(ctx, g, sites, o.target); err != nil {
			return false, err
		}
	}
	switch adm.Verdict {
	case policy.Admitted:
		return true, nil
	case policy.DeferForHold:
		g.Status.Reservation = nil
		o.deferred(adm)
		if !o.wasDeferred {
			EventPlannedFailoverDeferred.emit(r.Recorder, g, o.op, o.id, adm.RetryTime.UTC().Format(time.RFC3339Nano), adm.Message)
			if r.Metrics != nil {
				r.Metrics.Deferred.WithLabelValues(g.Namespace, g.Name, o.op).Inc()
			}
		}
		// Look again just after the earliest hold lapses; a renewal or
		// release wakes the controller earlier through the Lease watch.
		st.after(adm.RetryTime.Sub(r.Clock.Now()) + 100*time.Millisecond)
	default:
		g.Status.Reservation = nil
		o.waiting(adm.Message)
		st.after(waitRetry)
	}
	return false, nil
}

func (r *GroupReconciler) admit(ctx context.Context, g *v1.MysqlFailoverGroup, sites []topology.SiteState, target string) (policy.Admission, error) {
	recs, err := r.Leases.List(ctx, g.Namespace, g.Name, true)
	if err != nil {
		return policy.Admission{}, err
	}
	ready, why := policy.SiteReady(sites, target, g.Status.ActiveSite)
	return policy.Admit(policy.AdmissionInput{Now: r.Clock.Now(), Leases: recs, TargetReady: ready, TargetReason: why}), nil
}

func (r *GroupReconciler) releaseReservation(g *v1.MysqlFailoverGroup, op string) {
	if res := g.Status.Reservation; res != nil && res.Operation == op {
		g.Status.Reservation = nil
	}
}

// ---- planned failover

func (r *GroupReconciler) reconcilePlannedFailover(ctx context.Context, g *v1.MysqlFailoverGroup, sites []topology.SiteState, st *step) error {
	req := g.Spec.PlannedFailover
	if req == nil {
		return nil
	}
	// Always through g: a status write replaces g.Status with the server's copy.
	pf := func() *v1.PlannedFailoverStatus { return g.Status.PlannedFailover }
	if pf() == nil || pf().ID != req.ID {
		g.Status.PlannedFailover = &v1.PlannedFailoverStatus{ID: req.ID, TargetSite: req.TargetSite, Phase: v1.PlannedFailoverPhaseAdmitting}
	}
	target := pf().TargetSite
	switch pf().Phase {
	case v1.PlannedFailoverPhaseCompleted, v1.PlannedFailoverPhaseFailed:
		return nil
	case v1.PlannedFailoverPhasePromoting:
		if g.Status.ActiveSite != target || g.Status.Transition != nil {
			if err := r.promote(ctx, g, OpPlannedFailover, target); err != nil {
				return err
			}
		}
		return r.completePlanned(ctx, g, "Promoted")
	}
	if g.Status.ActiveSite == "" {
		pf().Phase, pf().Reason = v1.PlannedFailoverPhaseAdmitting, "NotBootstrapped"
		st.after(waitRetry)
		return nil
	}
	if target == g.Status.ActiveSite && g.Status.Reservation == nil {
		return r.completePlanned(ctx, g, "AlreadyActive")
	}
	ok, err := r.gate(ctx, g, sites, st, gated{
		op: OpPlannedFailover, id: req.ID, target: target,
		wasDeferred: pf().Phase == v1.PlannedFailoverPhaseDeferred,
		deferred: func(adm policy.Admission) {
			rt := metav1.NewMicroTime(adm.RetryTime)
			pf().Phase, pf().Reason = v1.PlannedFailoverPhaseDeferred, v1.DeferReasonDeploymentHold
			pf().Admission = &v1.Admission{DeferReason: v1.DeferReasonDeploymentHold, RetryTime: &rt, Message: adm.Message}
		},
		waiting: func(msg string) {
			pf().Phase, pf().Reason = v1.PlannedFailoverPhaseAdmitting, "Waiting"
			pf().Admission = &v1.Admission{Message: msg}
		},
	})
	if err != nil || !ok {
		return err
	}
	pf().Phase, pf().Reason, pf().Admission = v1.PlannedFailoverPhasePromoting, "", nil
	setCondition(g, v1.ConditionAutomaticFailoverHeld, true, "PlannedFailoverPromoting", "planned failover "+req.ID+" is moving the primary", r.now())
	if err := r.promote(ctx, g, OpPlannedFailover, target); err != nil {
		return err
	}
	return r.completePlanned(ctx, g, "Promoted")
}

func (r *GroupReconciler) completePlanned(ctx context.Context, g *v1.MysqlFailoverGroup, reason string) error {
	pf := g.Status.PlannedFailover
	pf.Phase, pf.Reason, pf.Admission = v1.PlannedFailoverPhaseCompleted, reason, nil
	r.releaseReservation(g, OpPlannedFailover)
	setCondition(g, v1.ConditionAutomaticFailoverHeld, false, "NoPlannedFailover", "", r.now())
	if err := r.writeStatus(ctx, g); err != nil {
		return err
	}
	EventOperationCompleted.emit(r.Recorder, g, OpPlannedFailover, pf.ID)
	return nil
}

// ---- ordered update

func (r *GroupReconciler) reconcileOrderedUpdate(ctx context.Context, g *v1.MysqlFailoverGroup, sites []topology.SiteState, st *step) error {
	rev := g.Spec.UpdateRevision
	if rev == "" || rev == g.Status.UpdatedRevision || g.Status.ActiveSite == "" {
		return nil
	}
	for i := 0; i < 5; i++ { // each phase persists its progress
		switch g.Status.UpdatePhase {
		case "", PhaseCompleted, PhaseFailed, PhaseAdmitting, PhaseDeferred:
			target := bestReplica(sites, g.Status.ActiveSite)
			if target == "" {
				target = g.Status.ActiveSite
			}
			ok, err := r.gate(ctx, g, sites, st, gated{op: OpOrderedUpdate, id: rev, target: target,
				wasDeferred: g.Status.UpdatePhase == PhaseDeferred,
				deferred:    func(policy.Admission) { g.Status.UpdatePhase = PhaseDeferred },
				waiting:     func(string) { g.Status.UpdatePhase = PhaseAdmitting },
			})
			if err != nil || !ok {
				return err
			}
			g.Status.UpdatePhase = PhaseUpdatingReplicas
		case PhaseUpdatingReplicas:
			for _, s := range g.Spec.Sites {
				if s.Name == g.Status.ActiveSite {
					continue
				}
				if err := r.driver().UpdateSite(ctx, g, s.Name, rev); err != nil {
					return fmt.Errorf("ordered update: %w", err)
				}
			}
			g.Status.UpdatePhase = PhaseFailingOver
			if len(g.Spec.Sites) == 1 {
				g.Status.UpdatePhase = PhaseUpdatingFormerPrimary
			}
		case PhaseFailingOver:
			target := bestReplica(sites, g.Status.ActiveSite)
			if t := g.Status.Transition; t != nil {
				target = t.TargetSite
			}
			if target == "" {
				st.after(waitRetry)
				return nil
			}
			if err := r.promote(ctx, g, OpOrderedUpdate, target); err != nil {
				return err
			}
			g.Status.UpdatePhase = PhaseUpdatingFormerPrimary
		case PhaseUpdatingFormerPrimary:
			for _, s := range g.Spec.Sites {
				if err := r.driver().UpdateSite(ctx, g, s.Name, rev); err != nil {
					return fmt.Errorf("ordered update: %w", err)
				}
			}
			g.Status.UpdatePhase, g.Status.UpdatedRevision = PhaseCompleted, rev
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

// bestReplica is the reachable, replicating non-active site with the least
// lag ("" when none).
func bestReplica(sites []topology.SiteState, active string) string {
	best := ""
	var lag float64
	for _, s := range sites {
		if s.Name == active || !s.Reachable || !s.ReplicationRunning {
			continue
		}
		if best == "" || s.LagSeconds < lag {
			best, lag = s.Name, s.LagSeconds
		}
	}
	return best
}

// ---- restore in place

func (r *GroupReconciler) reconcileRestoreInPlace(ctx context.Context, g *v1.MysqlFailoverGroup, sites []topology.SiteState, st *step) error {
	req := g.Spec.RestoreInPlace
	if req == nil || g.Status.ActiveSite == "" {
		return nil
	}
	if g.Status.RestoreInPlaceID != req.ID {
		g.Status.RestoreInPlaceID, g.Status.RestoreInPlace = req.ID, PhaseAdmitting
	}
	target := req.TargetSite
	if target == "" {
		target = g.Status.ActiveSite
	}
	for i := 0; i < 4; i++ {
		switch g.Status.RestoreInPlace {
		case PhaseCompleted, PhaseFailed:
			return nil
		case "", PhaseAdmitting, PhaseDeferred:
			ok, err := r.gate(ctx, g, sites, st, gated{op: OpRestoreInPlace, id: req.ID, target: target,
				wasDeferred: g.Status.RestoreInPlace == PhaseDeferred,
				deferred:    func(policy.Admission) { g.Status.RestoreInPlace = PhaseDeferred },
				waiting:     func(string) { g.Status.RestoreInPlace = PhaseAdmitting },
			})
			if err != nil || !ok {
				return err
			}
			g.Status.RestoreInPlace = PhaseRestoring
		case PhaseRestoring:
			if err := r.driver().RestoreSite(ctx, g, target, req.ID); err != nil {
				return fmt.Errorf("restore in place: %w", err)
			}
			g.Status.RestoreInPlace = PhasePromoting
		case PhasePromoting:
			if err := r.promote(ctx, g, OpRestoreInPlace, target); err != nil {
				return err
			}
			g.Status.RestoreInPlace = PhaseCompleted
			r.releaseReservation(g, OpRestoreInPlace)
			if err := r.writeStatus(ctx, g); err != nil {
				return err
			}
			EventOperationCompleted.emit(r.Recorder, g, OpRestoreInPlace, req.ID)
			return nil
		default:
			return fmt.Errorf("unknown restore phase %q", g.Status.RestoreInPlace)
		}
		if err := r.writeStatus(ctx, g); err != nil {
			return err
		}
	}
	return nil
}
