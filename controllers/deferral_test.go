package controllers

import (
	"net/http"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
)

// The deferral budget with a fake clock (issue 24): a hold that is renewed
// for ever defers a planned failover until spec.maxDeferralSeconds from its
// first deferral, with a warning at half; then the hold is revoked
// (deferral_budget_exhausted), new hold grants are refused, and the
// failover proceeds. The migration mutex is fenced by the move as usual.
func TestTheDeferralBudgetWarnsThenRevokesTheHoldsAndProceeds(t *testing.T) {
	f := newFixture(t, true)
	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) { g.Spec.MaxDeferralSeconds = ptr.To[int32](600) })
	f.settle()
	migToken, _ := f.grant("migration", "op-1", 120)
	holdToken, _ := f.grant("failover-hold", "op-1", 120)
	renew := func() {
		t.Helper()
		for kind, tok := range map[string]string{"migration": migToken, "failover-hold": holdToken} {
			if r := f.renew(kind, "op-1", tok); r.status != http.StatusOK {
				t.Fatalf("renew %s: %d %v", kind, r.status, r.body)
			}
		}
	}
	f.requestPlanned("req-1")
	start := f.clock.Now()
	res := f.settle()

	pf := f.get().Status.PlannedFailover
	exhausts := start.Add(10 * time.Minute)
	if pf.Phase != bloodravenv1alpha1.PlannedFailoverPhaseDeferred || pf.Admission == nil || pf.Admission.BudgetExhaustsAt == nil ||
		!pf.Admission.BudgetExhaustsAt.Time.Equal(exhausts) {
		t.Fatalf("deferred %+v, want budgetExhaustsAt %v", pf, exhausts)
	}
	if !pf.Admission.RetryTime.Time.Equal(start.Add(120 * time.Second).Truncate(time.Microsecond)) {
		t.Fatalf("retryTime %v, want the hold's expiry", pf.Admission.RetryTime)
	}
	if res.RequeueAfter > 121*time.Second {
		t.Fatalf("requeue after %v", res.RequeueAfter)
	}
	r := f.call(http.MethodGet, "", nil)
	if a, _ := r.body["admission"].(map[string]any); a["budgetExhaustsAt"] != exhausts.UTC().Format(time.RFC3339Nano) || a["operation"] != "PlannedFailover" || a["id"] != "req-1" {
		t.Fatalf("the observation's admission: %v", r.body["admission"])
	}

	// The pipeline renews for ever; the deferral lasts, and half the budget
	// warns once.
	for i := 0; i < 6; i++ {
		f.clock.Step(60 * time.Second)
		renew()
		f.settle()
	}
	if ev := f.events("DeferralBudgetWarning", 1); len(ev) != 1 {
		t.Fatalf("DeferralBudgetWarning events: %d", len(ev))
	}
	if f.get().Status.PlannedFailover.Phase != bloodravenv1alpha1.PlannedFailoverPhaseDeferred {
		t.Fatal("proceeded before the budget was spent")
	}
	for i := 0; i < 4; i++ {
		f.clock.Step(60 * time.Second)
		renew()
		f.settle()
	}
	// 10 minutes: spent. The hold is revoked, the failover ran.
	g := f.get()
	if g.Status.ActiveSite != "pdx" || g.Status.PlannedFailover.Phase != bloodravenv1alpha1.PlannedFailoverPhaseCompleted {
		t.Fatalf("after the budget: %s %+v", g.Status.ActiveSite, g.Status.PlannedFailover)
	}
	if ev := f.events("DeferralBudgetExhausted", 1); len(ev) != 1 {
		t.Fatalf("DeferralBudgetExhausted events: %d", len(ev))
	}
	if ev := f.events("DeferralBudgetWarning", 2); len(ev) != 1 {
		t.Fatalf("DeferralBudgetWarning events: %d, want one", len(ev))
	}
	_, hold, err := f.rec.Leases.GetOwn(f.ctx, g, leases.KindFailoverHold, "op-1", true)
	if err != nil || hold == nil || hold.State != leases.StateRevoked || hold.Reason != leases.ReasonDeferralBudgetExhausted {
		t.Fatalf("the hold: %+v %v", hold, err)
	}
	if r := f.renew("failover-hold", "op-1", holdToken); r.status != http.StatusConflict || r.body["error"] != "revoked" || r.body["reason"] != "deferral_budget_exhausted" {
		t.Fatalf("the revoked hold renews: %d %v", r.status, r.body)
	}
	// The move fences the mutex as usual.
	if r := f.renew("migration", "op-1", migToken); r.status != http.StatusConflict || r.body["reason"] != "topology_changed" {
		t.Fatalf("the mutex after the move: %d %v", r.status, r.body)
	}
	// The operation has run: its budget is gone, holds are granted again.
	if len(g.Status.DeferralBudgets) != 0 {
		t.Fatalf("budgets after the operation ran: %+v", g.Status.DeferralBudgets)
	}
	f.grant("migration", "op-2", 60)
	f.grant("failover-hold", "op-2", 60)
}

// While the budget is spent and the operation has not run (here its
// target is not ready), a new hold grant answers 409
// deferral_budget_exhausted with retryAfterSeconds, after 403
// migration_not_held.
func TestASpentBudgetRefusesNewHolds(t *testing.T) {
	f := newFixture(t, true)
	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) { g.Spec.MaxDeferralSeconds = ptr.To[int32](60) })
	f.settle()
	f.grant("migration", "op-1", 120)
	f.grant("failover-hold", "op-1", 120)
	f.requestPlanned("req-1")
	f.settle()
	f.driver.Kill(f.group, "pdx") // the target waits: the operation cannot run
	f.clock.Step(61 * time.Second)
	f.settle()
	g := f.get()
	if len(g.Status.DeferralBudgets) != 1 || !g.Status.DeferralBudgets[0].Exhausted || g.Status.ActiveSite != "iad" {
		t.Fatalf("budgets %+v, active %s", g.Status.DeferralBudgets, g.Status.ActiveSite)
	}
	r := f.call(http.MethodPost, "/leases", map[string]any{"kind": "failover-hold", "operationId": "op-1", "instance": "counter-app"})
	if r.status != http.StatusConflict || r.body["error"] != "revoked" {
		t.Fatalf("the revoked hold's re-grant: %d %v", r.status, r.body)
	}
	if r := f.call(http.MethodPost, "/leases", map[string]any{"kind": "failover-hold", "operationId": "op-9", "instance": "counter-app"}); r.status != http.StatusForbidden {
		t.Fatalf("a hold of another operation: %d %v, want 403 migration_not_held first", r.status, r.body)
	}
}

// Emergency paths read none of the deferral budget: with a budget running
// for a deferred planned failover and its hold renewed, the dead primary is
// replaced after the detection budget exactly as without one (the same
// requeue, the same promotion), and nothing of the budget is acted on: the
// hold ends by the move (topology_changed), not by the budget.
func TestEmergencyFailoverReadsNoDeferralBudget(t *testing.T) {
	f := newFixture(t, true)
	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) { g.Spec.MaxDeferralSeconds = ptr.To[int32](600) })
	f.settle()
	f.grant("migration", "op-1", 120)
	holdTok, _ := f.grant("failover-hold", "op-1", 120)
	f.requestPlanned("req-1")
	f.settle()
	if b := f.get().Status.DeferralBudgets; len(b) != 1 {
		t.Fatalf("no budget running: %+v", b)
	}
	f.driver.Kill(f.group, "iad")
	res := f.settle()
	if res.RequeueAfter < 30*time.Second || res.RequeueAfter >= 31*time.Second {
		t.Fatalf("requeue %v, want the 30 s detection budget", res.RequeueAfter)
	}
	f.clock.Step(res.RequeueAfter)
	f.reconcile()
	g := f.get()
	if g.Status.ActiveSite != "pdx" || g.Status.TopologyGeneration != 2 {
		t.Fatalf("after the detection budget: %s/%d", g.Status.ActiveSite, g.Status.TopologyGeneration)
	}
	if r := f.renew("failover-hold", "op-1", holdTok); r.status != http.StatusConflict || r.body["reason"] != "topology_changed" {
		t.Fatalf("the hold after the emergency: %d %v", r.status, r.body)
	}
	if ev := f.events("DeferralBudgetExhausted", 0); len(ev) != 0 {
		t.Fatalf("the emergency path acted on the budget: %+v", ev)
	}
}
