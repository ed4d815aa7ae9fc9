package deployapi

import (
	"net/http"
	"time"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/deployclient/wire"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/policy"
)

// GET /deploy/v1/groups/{group}: the group as a pipeline sees it.

// getGroup answers the group's status and its live leases. It is an
// observation: it answers 200 during a transition (stable=false) and
// grants nothing.
func (s *Server) getGroup(r *http.Request, _ *call, g *bloodravenv1alpha1.MysqlFailoverGroup) result {
	recs, err := s.leases.List(r.Context(), g.Namespace, g.Name, false)
	if err != nil {
		return fail(err)
	}
	st := &g.Status
	stable, reason := policy.Stability(st)
	out := wire.Group{
		Group: g.Name, Namespace: g.Namespace, ActiveSite: st.ActiveSite, TopologyGeneration: st.TopologyGeneration,
		Health: wire.Health{
			Ready: st.Health.Ready, DegradedReason: st.Health.DegradedReason, ReplicationRunning: st.Health.ReplicationRunning,
			ReplicationLagSeconds: st.Health.ReplicationLagSeconds, RecoveryPending: st.Health.RecoveryPending,
		},
		Operations: wire.Operations{UpdatePhase: string(st.UpdatePhase), RestoreInPlace: string(st.RestoreInPlace), DragonflyUpgrade: string(st.DragonflyUpgrade)},
		Stable:     stable, UnstableReason: reason,
		Leases: []wire.ListedLease{},
	}
	if pf := st.PlannedFailover; pf != nil {
		out.Operations.PlannedFailover = wire.Planned{Phase: string(pf.Phase), Reason: pf.Reason}
	}
	var earliest time.Time
	for _, b := range st.DeferralBudgets {
		if out.Admission == nil || b.ExhaustsAt.Time.Before(earliest) {
			earliest = b.ExhaustsAt.Time
			out.Admission = &wire.Admission{Operation: string(b.Operation), ID: b.ID, BudgetExhaustsAt: formatTime(earliest)}
		}
	}
	v := policy.CutOver(st, s.clock.Now(), policy.DefaultCutOverMargin)
	out.CutOver = &wire.CutOver{Allowed: v.Allowed, Reason: v.Reason, Message: v.Message, MarginSeconds: int64(policy.DefaultCutOverMargin / time.Second)}
	for _, rec := range leases.Effective(recs, string(g.UID), s.clock.Now()) {
		out.Leases = append(out.Leases, wire.ListedLease{Kind: string(rec.Kind), OperationID: rec.OperationID, Instance: rec.Instance,
			ExpiresAt: formatTime(rec.ExpiresAt), TopologyGeneration: rec.Generation})
	}
	return ok(http.StatusOK, out)
}
