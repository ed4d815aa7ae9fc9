package deployapi

import (
	"net/http"
	"time"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/policy"
)

// GET /deploy/v1/groups/{group}: the group as a pipeline sees it.

type healthJSON struct {
	Ready                 bool    `json:"ready"`
	DegradedReason        string  `json:"degradedReason"`
	ReplicationRunning    bool    `json:"replicationRunning"`
	ReplicationLagSeconds float64 `json:"replicationLagSeconds"`
	RecoveryPending       bool    `json:"recoveryPending"`
}

type plannedJSON struct {
	Phase  string `json:"phase"`
	Reason string `json:"reason"`
}

type operationsJSON struct {
	PlannedFailover  plannedJSON `json:"plannedFailover"`
	UpdatePhase      string      `json:"updatePhase"`
	RestoreInPlace   string      `json:"restoreInPlace"`
	DragonflyUpgrade string      `json:"dragonflyUpgrade"`
}

type leaseJSON struct {
	Kind               string `json:"kind"`
	OperationID        string `json:"operationId"`
	Instance           string `json:"instance"`
	ExpiresAt          string `json:"expiresAt"`
	TopologyGeneration int64  `json:"topologyGeneration"`
}

// admissionJSON is a running deferral budget (docs/design.md): when the
// planned operation it bounds proceeds whatever the holds say. Only
// present while one runs (spec.maxDeferralSeconds set and a hold deferred a
// request); the earliest when several do.
type admissionJSON struct {
	Operation        string `json:"operation"`
	ID               string `json:"id"`
	BudgetExhaustsAt string `json:"budgetExhaustsAt"`
}

type groupJSON struct {
	Group              string         `json:"group"`
	Namespace          string         `json:"namespace"`
	ActiveSite         string         `json:"activeSite"`
	TopologyGeneration int64          `json:"topologyGeneration"`
	Health             healthJSON     `json:"health"`
	Operations         operationsJSON `json:"operations"`
	Stable             bool           `json:"stable"`
	UnstableReason     string         `json:"unstableReason"`
	Leases             []leaseJSON    `json:"leases"`
	Admission          *admissionJSON `json:"admission,omitempty"`
}

// getGroup answers the group's status and its live leases. It is an
// observation: it answers 200 during a transition (stable=false) and
// grants nothing.
func (s *Server) getGroup(r *http.Request, _ *call, g *v1.MysqlFailoverGroup) result {
	recs, err := s.leases.List(r.Context(), g.Namespace, g.Name, false)
	if err != nil {
		return fail(err)
	}
	st := &g.Status
	stable, reason := policy.Stability(st)
	out := groupJSON{
		Group: g.Name, Namespace: g.Namespace, ActiveSite: st.ActiveSite, TopologyGeneration: st.TopologyGeneration,
		Health: healthJSON{
			Ready: st.Health.Ready, DegradedReason: st.Health.DegradedReason, ReplicationRunning: st.Health.ReplicationRunning,
			ReplicationLagSeconds: st.Health.ReplicationLagSeconds, RecoveryPending: st.Health.RecoveryPending,
		},
		Operations: operationsJSON{UpdatePhase: string(st.UpdatePhase), RestoreInPlace: string(st.RestoreInPlace), DragonflyUpgrade: string(st.DragonflyUpgrade)},
		Stable:     stable, UnstableReason: reason,
		Leases: []leaseJSON{},
	}
	if pf := st.PlannedFailover; pf != nil {
		out.Operations.PlannedFailover = plannedJSON{Phase: string(pf.Phase), Reason: pf.Reason}
	}
	var earliest time.Time
	for _, b := range st.DeferralBudgets {
		if out.Admission == nil || b.ExhaustsAt.Time.Before(earliest) {
			earliest = b.ExhaustsAt.Time
			out.Admission = &admissionJSON{Operation: string(b.Operation), ID: b.ID, BudgetExhaustsAt: formatTime(earliest)}
		}
	}
	for _, rec := range leases.Effective(recs, string(g.UID), s.clock.Now()) {
		out.Leases = append(out.Leases, leaseJSON{Kind: string(rec.Kind), OperationID: rec.OperationID, Instance: rec.Instance,
			ExpiresAt: formatTime(rec.ExpiresAt), TopologyGeneration: rec.Generation})
	}
	return ok(http.StatusOK, out)
}
