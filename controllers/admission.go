package controllers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/store"
	"github.com/shipstream/bloodraven/store/leasestore"
	"github.com/shipstream/bloodraven/topology"
)

// plannedRequest names the planned operation admitPlanned decides on.
type plannedRequest struct {
	op         bloodravenv1alpha1.OperationName
	id, target string
}

// admitPlanned admits a planned operation. It returns true once the operation holds
// a persisted reservation and no live failover-hold exists after it was
// written. The deployment API refuses holds with 423 while a reservation
// stands and re-reads the group after writing a hold grant; admitPlanned, after
// writing its reservation, re-reads the holds and records every lapsed one
// as expired with the resourceVersion it read. So a grant, re-grant or
// renewal racing an admission meets it in one compare-and-swap order: one
// of the two sees the other, and never both proceed.
func (r *GroupReconciler) admitPlanned(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, sites []topology.SiteState, st *passOutcome, o plannedRequest) (bool, error) {
	if res := g.Status.Reservation; res != nil && (res.Operation != o.op || res.ID != o.id) {
		setPhase(g, o.op, bloodravenv1alpha1.PhaseAdmitting, "Waiting", &bloodravenv1alpha1.Admission{Message: fmt.Sprintf("waiting for %s %s to finish", res.Operation, res.ID)})
		st.after(waitRetry)
		return false, nil
	}
	now := r.Clock.Now()
	budget := r.deferralBudget(g, o, now)
	adm, objOf, err := r.admit(ctx, g, sites, o.target, budget.Spent)
	if err != nil {
		return false, err
	}
	if budget.Spent {
		// The holds no longer defer the request: each is revoked now,
		// whatever else the request waits for.
		if budget.Exhaust {
			b := r.budgetRecord(g, o, now)
			b.Exhausted, b.Warned = true, true
			EventDeferralBudgetExhausted.emit(r.Recorder, g, o.op, o.id, r.maxDeferral(g).String(), b.FirstDeferredAt.UTC().Format(time.RFC3339))
		}
		if err := r.revokeHolds(ctx, g, adm.Revoke, objOf); err != nil {
			// A renewal landed first; an admission revokes under its
			// reservation (confirmAdmission), else the next pass does.
			log.FromContext(ctx).Info("could not revoke every failover-hold of a spent deferral budget yet; retrying", "error", err.Error())
			st.after(waitRetry)
		}
	}
	var exhaustsAt *metav1.MicroTime
	if budget.Running {
		exhaustsAt = microTime(budget.ExhaustsAt)
	}
	if adm.Verdict == policy.Admitted {
		if g.Status.Reservation == nil {
			g.Status.Reservation = &bloodravenv1alpha1.OperationReservation{Operation: o.op, ID: o.id, ReservedAt: r.now()}
			if err := r.writeStatus(ctx, g); err != nil {
				return false, err
			}
		}
		// Also on re-entry with the reservation already persisted (an
		// earlier attempt failed after writing it): the admission stands
		// only once every lapsed hold is recorded with the resourceVersion
		// read after the reservation.
		if adm, err = r.confirmAdmission(ctx, g, sites, o.target, budget.Spent); err != nil {
			return false, err
		}
	}
	switch adm.Verdict {
	case policy.Admitted:
		return true, nil
	case policy.DeferForHold:
		g.Status.Reservation = nil
		recheck := adm.RetryTime
		if r.maxDeferral(g) > 0 {
			// The first deferral starts the request's budget.
			b := r.budgetRecord(g, o, now)
			budget = policy.DecideDeferralBudget(policy.DeferralBudgetInput{Now: now, Max: r.maxDeferral(g),
				FirstDeferred: b.FirstDeferredAt.Time, Warned: b.Warned, Exhausted: b.Exhausted})
			b.ExhaustsAt = metav1.NewMicroTime(budget.ExhaustsAt)
			exhaustsAt = microTime(budget.ExhaustsAt)
			if budget.Warn {
				b.Warned = true
				EventDeferralBudgetWarning.emit(r.Recorder, g, o.op, o.id, budget.ExhaustsAt.UTC().Format(time.RFC3339Nano))
			}
			if !budget.RecheckAt.IsZero() && budget.RecheckAt.Before(recheck) {
				recheck = budget.RecheckAt
			}
		}
		wasDeferred := g.Status.Operation(o.op, &g.Spec).Phase == bloodravenv1alpha1.PhaseDeferred
		setPhase(g, o.op, bloodravenv1alpha1.PhaseDeferred, bloodravenv1alpha1.DeferReasonDeploymentHold,
			&bloodravenv1alpha1.Admission{DeferReason: bloodravenv1alpha1.DeferReasonDeploymentHold, RetryTime: microTime(adm.RetryTime), Message: adm.Message, BudgetExhaustsAt: exhaustsAt})
		if !wasDeferred {
			EventPlannedFailoverDeferred.emit(r.Recorder, g, o.op, o.id, adm.RetryTime.UTC().Format(time.RFC3339Nano), adm.Message)
			if r.Metrics != nil {
				r.Metrics.Deferred.WithLabelValues(g.Namespace, g.Name, string(o.op)).Inc()
			}
		}
		// Look again just after the earliest hold lapses (or the budget
		// reaches its half or its end); a renewal or release wakes the
		// controller earlier through the Lease watch.
		st.after(recheck.Sub(now) + 100*time.Millisecond)
	default:
		g.Status.Reservation = nil
		reason := adm.Reason
		if reason == "" {
			reason = "Waiting"
		}
		setPhase(g, o.op, bloodravenv1alpha1.PhaseAdmitting, reason, &bloodravenv1alpha1.Admission{Message: adm.Message, BudgetExhaustsAt: exhaustsAt})
		st.after(waitRetry)
	}
	return false, nil
}

// maxDeferral is spec.maxDeferralSeconds; zero when unset (no budget).
func (r *GroupReconciler) maxDeferral(g *bloodravenv1alpha1.MysqlFailoverGroup) time.Duration {
	if m := g.Spec.MaxDeferralSeconds; m != nil && *m > 0 {
		return time.Duration(*m) * time.Second
	}
	return 0
}

// deferralBudget decides o's request's budget from what the status records.
func (r *GroupReconciler) deferralBudget(g *bloodravenv1alpha1.MysqlFailoverGroup, o plannedRequest, now time.Time) policy.DeferralBudget {
	in := policy.DeferralBudgetInput{Now: now, Max: r.maxDeferral(g)}
	for _, b := range g.Status.DeferralBudgets {
		if b.Operation == o.op && b.ID == o.id {
			in.FirstDeferred, in.Warned, in.Exhausted = b.FirstDeferredAt.Time, b.Warned, b.Exhausted
		}
	}
	return policy.DecideDeferralBudget(in)
}

// budgetRecord is o's request's budget in the status, created (from now)
// when absent; a budget of an earlier request of the operation is replaced.
func (r *GroupReconciler) budgetRecord(g *bloodravenv1alpha1.MysqlFailoverGroup, o plannedRequest, now time.Time) *bloodravenv1alpha1.DeferralBudget {
	for i := range g.Status.DeferralBudgets {
		b := &g.Status.DeferralBudgets[i]
		if b.Operation != o.op {
			continue
		}
		if b.ID != o.id {
			*b = bloodravenv1alpha1.DeferralBudget{Operation: o.op, ID: o.id, FirstDeferredAt: metav1.NewMicroTime(now)}
		}
		return b
	}
	g.Status.DeferralBudgets = append(g.Status.DeferralBudgets, bloodravenv1alpha1.DeferralBudget{Operation: o.op, ID: o.id, FirstDeferredAt: metav1.NewMicroTime(now)})
	return &g.Status.DeferralBudgets[len(g.Status.DeferralBudgets)-1]
}

// pruneDeferralBudgets drops the budgets of requests that ran or are gone
// (policy.DeferralBudgetStands): hold grants are then granted again.
func pruneDeferralBudgets(g *bloodravenv1alpha1.MysqlFailoverGroup) {
	if len(g.Status.DeferralBudgets) == 0 {
		return
	}
	reqs := requests(g)
	var kept []bloodravenv1alpha1.DeferralBudget
	for _, b := range g.Status.DeferralBudgets {
		if policy.DeferralBudgetStands(b, reqs, g.Status.Operation(b.Operation, &g.Spec)) {
			kept = append(kept, b)
		}
	}
	g.Status.DeferralBudgets = kept
}

// revokeHolds ends holds whose request's deferral budget is spent: each
// record is written revoked (deferral_budget_exhausted) with the
// resourceVersion it was read at, so a renewal that landed first wins and
// the next pass decides again. The operations keep their migration mutex
// (no tombstone). Announced like every revocation: one
// DeploymentLeaseRevoked naming the operations, and the counter.
func (r *GroupReconciler) revokeHolds(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, holds []*leases.Record, objOf map[*leases.Record]*leasestore.Object) error {
	now := r.Clock.Now()
	var ops []string
	var errs []error
	for _, h := range holds {
		if _, err := r.Leases.Update(ctx, g, objOf[h], h.Revoked(leases.ReasonDeferralBudgetExhausted, now)); err != nil {
			errs = append(errs, fmt.Errorf("revoke the failover-hold of %s (deferral budget spent): %w", h.OperationID, err))
			continue
		}
		ops = append(ops, h.OperationID)
	}
	if len(ops) > 0 {
		sort.Strings(ops)
		EventDeploymentLeaseRevoked.emit(r.Recorder, g, leases.ReasonDeferralBudgetExhausted, g.Status.TopologyGeneration, ops)
		r.Metrics.revoked(g, leases.ReasonDeferralBudgetExhausted, len(ops), now)
	}
	return errors.Join(errs...)
}

// fenceOthers is every planned path's last step before it writes a
// transition. The probe must show every site ready (policy.PlannedReady);
// then every site but target is made read-only and confirmed
// (topology.Driver.FenceOthers), and target has applied what they wrote. It
// skips no site. When either fails, no transition is written, so the
// operation never holds the emergency path (a persisted transition does);
// the active site, which a failed fence may have fenced, is reopened at
// once; and the operation waits: it returns false, the reason
// (policy.WaitSiteUnreachable naming the site, policy.WaitTargetNotReady or
// policy.WaitFenceFailed) and the message.
func (r *GroupReconciler) fenceOthers(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, sites []topology.SiteState, op bloodravenv1alpha1.OperationName, id, target string, st *passOutcome) (ok bool, reason, msg string) {
	if ready, reason, msg := policy.PlannedReady(sites, target, g.Status.ActiveSite); !ready {
		st.after(waitRetry)
		return false, reason, msg
	}
	err := r.driver().FenceOthers(ctx, g, target)
	if err == nil {
		return true, "", ""
	}
	reason, msg = policy.WaitFenceFailed, fmt.Sprintf("cannot fence every other site before promoting %s: %v", target, err)
	if ue := (*topology.UnreachableError)(nil); errors.As(err, &ue) {
		reason = policy.WaitSiteUnreachable
		msg = fmt.Sprintf("site %s is unreachable or could not be confirmed read-only: a planned operation fences every other site before it promotes %s, and waits (%v)", ue.Site, target, ue.Err)
	}
	if active := g.Status.ActiveSite; active != "" && active != target {
		if rerr := r.driver().Promote(ctx, g, active, g.Status.TopologyGeneration, false); rerr != nil {
			// The safety paths reassert it once it answers (ActionReassert).
			log.FromContext(ctx).Info("could not reopen the active site after a failed planned fence; the safety paths retry",
				"site", active, "error", rerr.Error())
		}
	}
	EventOperationWaiting.emit(r.Recorder, g, op, id, msg)
	st.after(waitRetry)
	return false, reason, msg
}

// admit reads the group's leases fresh and decides.
func (r *GroupReconciler) admit(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, sites []topology.SiteState, target string, budgetSpent bool) (policy.Admission, map[*leases.Record]*leasestore.Object, error) {
	objs, err := r.Leases.ListObjects(ctx, g.Namespace, g.Name, true)
	if err != nil {
		return policy.Admission{}, nil, err
	}
	recs, objOf := leasestore.Records(objs)
	ready, wait, why := policy.PlannedReady(sites, target, g.Status.ActiveSite)
	return policy.Admit(policy.AdmissionInput{Now: r.Clock.Now(), GroupUID: string(g.UID), Leases: recs,
		TargetReady: ready, TargetWait: wait, TargetReason: why, BudgetSpent: budgetSpent}), objOf, nil
}

// confirmAdmission re-decides after the reservation is persisted and makes
// the end of every lapsed hold durable: each is written as expired with the
// resourceVersion just read. A write that conflicts means a renewal or
// re-grant landed first; the decision is taken again from fresh reads.
func (r *GroupReconciler) confirmAdmission(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, sites []topology.SiteState, target string, budgetSpent bool) (policy.Admission, error) {
	var adm policy.Admission
	err := store.Retry(func(bool) error {
		var objOf map[*leases.Record]*leasestore.Object
		var err error
		if adm, objOf, err = r.admit(ctx, g, sites, target, budgetSpent); err != nil || adm.Verdict != policy.Admitted {
			return err
		}
		for _, h := range adm.Lapsed {
			if _, err := r.Leases.Update(ctx, g, objOf[h], h.Expired()); err != nil {
				return err
			}
		}
		// A hold that no longer defers because the budget is spent, and
		// that a first pass could not revoke, is revoked here, under the
		// reservation (which refuses its renewal).
		return r.revokeHolds(ctx, g, adm.Revoke, objOf)
	})
	return adm, err
}

func (r *GroupReconciler) releaseReservation(g *bloodravenv1alpha1.MysqlFailoverGroup, op bloodravenv1alpha1.OperationName) {
	if res := g.Status.Reservation; res != nil && res.Operation == op {
		g.Status.Reservation = nil
	}
}

func microTime(t time.Time) *metav1.MicroTime {
	mt := metav1.NewMicroTime(t)
	return &mt
}
