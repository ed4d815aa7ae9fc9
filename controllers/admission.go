package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/leasestore"
	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/topology"
)

// gated names the operation the admission gate decides on.
type gated struct {
	op         v1.OperationName
	id, target string
}

// gate admits a planned operation. It returns true once the operation holds
// a persisted reservation and no live failover-hold exists after it was
// written. The deployment API refuses holds with 423 while a reservation
// stands and re-reads the group after writing a hold grant; the gate, after
// writing its reservation, re-reads the holds and records every lapsed one
// as expired with the resourceVersion it read. So a grant, re-grant or
// renewal racing an admission meets it in one compare-and-swap order: one
// of the two sees the other, and never both proceed.
func (r *GroupReconciler) gate(ctx context.Context, g *v1.MysqlFailoverGroup, sites []topology.SiteState, st *step, o gated) (bool, error) {
	if res := g.Status.Reservation; res != nil && (res.Operation != o.op || res.ID != o.id) {
		setPhase(g, o.op, v1.PhaseAdmitting, "Waiting", &v1.Admission{Message: fmt.Sprintf("waiting for %s %s to finish", res.Operation, res.ID)})
		st.after(waitRetry)
		return false, nil
	}
	adm, _, err := r.admit(ctx, g, sites, o.target)
	if err != nil {
		return false, err
	}
	if adm.Verdict == policy.Admitted {
		if g.Status.Reservation == nil {
			g.Status.Reservation = &v1.OperationReservation{Operation: o.op, ID: o.id, ReservedAt: r.now()}
			if err := r.writeStatus(ctx, g); err != nil {
				return false, err
			}
		}
		// Also on re-entry with the reservation already persisted (an
		// earlier attempt failed after writing it): the admission stands
		// only once every lapsed hold is recorded with the resourceVersion
		// read after the reservation.
		if adm, err = r.confirmAdmission(ctx, g, sites, o.target); err != nil {
			return false, err
		}
	}
	switch adm.Verdict {
	case policy.Admitted:
		return true, nil
	case policy.DeferForHold:
		g.Status.Reservation = nil
		wasDeferred := g.Status.Operation(o.op, &g.Spec).Phase == v1.PhaseDeferred
		setPhase(g, o.op, v1.PhaseDeferred, v1.DeferReasonDeploymentHold,
			&v1.Admission{DeferReason: v1.DeferReasonDeploymentHold, RetryTime: microTime(adm.RetryTime), Message: adm.Message})
		if !wasDeferred {
			EventPlannedFailoverDeferred.emit(r.Recorder, g, o.op, o.id, adm.RetryTime.UTC().Format(time.RFC3339Nano), adm.Message)
			if r.Metrics != nil {
				r.Metrics.Deferred.WithLabelValues(g.Namespace, g.Name, string(o.op)).Inc()
			}
		}
		// Look again just after the earliest hold lapses; a renewal or
		// release wakes the controller earlier through the Lease watch.
		st.after(adm.RetryTime.Sub(r.Clock.Now()) + 100*time.Millisecond)
	default:
		g.Status.Reservation = nil
		reason := adm.Reason
		if reason == "" {
			reason = "Waiting"
		}
		setPhase(g, o.op, v1.PhaseAdmitting, reason, &v1.Admission{Message: adm.Message})
		st.after(waitRetry)
	}
	return false, nil
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
func (r *GroupReconciler) fenceOthers(ctx context.Context, g *v1.MysqlFailoverGroup, sites []topology.SiteState, op v1.OperationName, id, target string, st *step) (ok bool, reason, msg string) {
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
func (r *GroupReconciler) admit(ctx context.Context, g *v1.MysqlFailoverGroup, sites []topology.SiteState, target string) (policy.Admission, map[*leases.Record]*leasestore.Object, error) {
	objs, err := r.Leases.ListObjects(ctx, g.Namespace, g.Name, true)
	if err != nil {
		return policy.Admission{}, nil, err
	}
	recs, objOf := leasestore.Records(objs)
	ready, wait, why := policy.PlannedReady(sites, target, g.Status.ActiveSite)
	return policy.Admit(policy.AdmissionInput{Now: r.Clock.Now(), GroupUID: string(g.UID), Leases: recs,
		TargetReady: ready, TargetWait: wait, TargetReason: why}), objOf, nil
}

// confirmAdmission re-decides after the reservation is persisted and makes
// the end of every lapsed hold durable: each is written as expired with the
// resourceVersion just read. A write that conflicts means a renewal or
// re-grant landed first; the decision is taken again from fresh reads.
func (r *GroupReconciler) confirmAdmission(ctx context.Context, g *v1.MysqlFailoverGroup, sites []topology.SiteState, target string) (policy.Admission, error) {
	var adm policy.Admission
	err := leasestore.Optimistic(func(bool) error {
		var objOf map[*leases.Record]*leasestore.Object
		var err error
		if adm, objOf, err = r.admit(ctx, g, sites, target); err != nil || adm.Verdict != policy.Admitted {
			return err
		}
		for _, h := range adm.Lapsed {
			if _, err := r.Leases.Update(ctx, g, objOf[h], h.Expired()); err != nil {
				return err
			}
		}
		return nil
	})
	return adm, err
}

func (r *GroupReconciler) releaseReservation(g *v1.MysqlFailoverGroup, op v1.OperationName) {
	if res := g.Status.Reservation; res != nil && res.Operation == op {
		g.Status.Reservation = nil
	}
}

func microTime(t time.Time) *metav1.MicroTime {
	mt := metav1.NewMicroTime(t)
	return &mt
}
