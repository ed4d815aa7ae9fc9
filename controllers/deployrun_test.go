package controllers

import (
	"net/http"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/policy"
)

func (f *fixture) runOf(op string) *bloodravenv1alpha1.DeployRun {
	f.t.Helper()
	r := f.latestRun(op)
	if r == nil {
		f.t.Fatalf("no DeployRun of %s", op)
	}
	return r
}

// latestRun is the DeployRun of op's latest tenure for counter-app, nil
// when it has none.
func (f *fixture) latestRun(op string) *bloodravenv1alpha1.DeployRun {
	f.t.Helper()
	var list bloodravenv1alpha1.DeployRunList
	if err := env.Client.List(f.ctx, &list, client.InNamespace(f.ns)); err != nil {
		f.t.Fatal(err)
	}
	var out *bloodravenv1alpha1.DeployRun
	for i := range list.Items {
		r := &list.Items[i]
		if r.Spec.OperationID != op || r.Spec.Instance != "counter-app" {
			continue
		}
		if out == nil || (r.Status.StartTime != nil && out.Status.StartTime != nil && out.Status.StartTime.Before(r.Status.StartTime)) {
			out = r
		}
	}
	return out
}

func (f *fixture) runOps() []string {
	f.t.Helper()
	var list bloodravenv1alpha1.DeployRunList
	if err := env.Client.List(f.ctx, &list, client.InNamespace(f.ns)); err != nil {
		f.t.Fatal(err)
	}
	var ops []string
	for _, r := range list.Items {
		ops = append(ops, r.Spec.OperationID)
	}
	sort.Strings(ops)
	return ops
}

func TestBookkeepingWritesTheRunTheAPIDidNotAndRecordsItsEnd(t *testing.T) {
	for _, tc := range []struct {
		name    string
		end     func(f *fixture)
		outcome bloodravenv1alpha1.DeployRunOutcome
		reason  string
	}{
		{"its lease expires", func(f *fixture) { f.clock.Step(21 * time.Second) }, bloodravenv1alpha1.DeployRunExpired, ""},
		{"the operator revokes it", func(f *fixture) {
			f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
				metav1.SetMetaDataAnnotation(&g.ObjectMeta, bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation, "")
			})
		}, bloodravenv1alpha1.DeployRunRevoked, "operator_revoked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, true)
			f.settle()
			f.ddlLease("op-1", 30)
			// The deployment API's write is lost (as if the API server had
			// refused it): the bookkeeping writes the run from the record.
			if err := env.Client.Delete(f.ctx, f.runOf("op-1")); err != nil {
				t.Fatal(err)
			}
			// Not while the record is younger than a grant's confirmation:
			// it may be a grant about to be withdrawn.
			f.reconcile()
			if f.latestRun("op-1") != nil {
				t.Fatal("the bookkeeping wrote a run for a record younger than a grant's confirmation")
			}
			f.clock.Step(policy.RunBackstopDelay)
			f.reconcile()
			if r := f.runOf("op-1"); r.Status.Outcome != bloodravenv1alpha1.DeployRunRunning || r.Status.Phase != "ddl" || r.Spec.GrantGeneration != 1 {
				t.Fatalf("run after bookkeeping: %+v %+v", r.Spec, r.Status)
			}
			tc.end(f)
			f.reconcile()
			r := f.runOf("op-1")
			if r.Status.Outcome != tc.outcome || r.Status.Phase != "ddl" || r.Status.RevocationReason != tc.reason || r.Status.EndTime == nil {
				t.Fatalf("run after its end: %+v", r.Status)
			}
		})
	}
}

func TestBookkeepingKeepsTheHistoryPerInstance(t *testing.T) {
	f := newFixture(t, true)
	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) { g.Spec.DeployRunHistory = 2 })
	f.settle()
	for _, op := range []string{"op-1", "op-2", "op-3", "op-4"} {
		token, _ := f.grant("migration", op, 30)
		if r := f.call(http.MethodDelete, "/leases/migration/"+op, nil, "X-Lease-Token", token, "X-Deploy-Outcome", "succeeded"); r.status != http.StatusNoContent {
			t.Fatalf("release %s: %d %v", op, r.status, r.body)
		}
		f.clock.Step(time.Second)
	}
	f.grant("migration", "op-5", 30)
	f.reconcile()
	// op-5 runs, and counts: the history keeps it and the newest ended run.
	if got := f.runOps(); len(got) != 2 || got[0] != "op-4" || got[1] != "op-5" {
		t.Fatalf("runs kept: %v, want op-4 and op-5", got)
	}
	if r := f.runOf("op-4"); r.Status.Outcome != bloodravenv1alpha1.DeployRunSucceeded {
		t.Fatalf("op-4: %+v", r.Status)
	}
}

func TestARunWhoseRecordWasReplacedUnseenEndsUnknown(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	f.grant("migration", "op-1", 30)
	start := f.runOf("op-1").Status.StartTime
	f.clock.Step(31 * time.Second)
	f.grant("migration", "op-2", 30) // the API records op-1's end first
	if r := f.runOf("op-1"); r.Status.Outcome != bloodravenv1alpha1.DeployRunExpired {
		t.Fatalf("op-1 after the take-over: %+v", r.Status)
	}
	// As if that write had been lost: op-1 still says running.
	r := f.runOf("op-1")
	r.Status = bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunRunning, Phase: "pre-ddl", StartTime: start}
	if err := env.Client.Status().Update(f.ctx, r); err != nil {
		t.Fatal(err)
	}
	f.reconcile()
	if r := f.runOf("op-1"); r.Status.Outcome != bloodravenv1alpha1.DeployRunUnknown || r.Status.LeaseEnd != bloodravenv1alpha1.LeaseUnknown {
		t.Fatalf("op-1, displaced unseen: %+v", r.Status)
	}
	if r := f.runOf("op-2"); r.Status.Outcome != bloodravenv1alpha1.DeployRunRunning {
		t.Fatalf("op-2: %+v", r.Status)
	}
}

// The promotion's reconcile fences and revokes, and writes no history: the
// revoked migration's DeployRun and its database's verification gate
// follow on the next pass, which it asks for at once, at ordinary priority.
func TestThePromotionsPassRevokesAndLeavesRunsAndGatesToTheNextPass(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	tok := f.ddlLease("op-1", 120)
	f.driver.Kill(f.group, "iad")
	res := f.settle()
	f.clock.Step(res.RequeueAfter)
	res = f.reconcile() // the emergency promotion of pdx
	if g := f.get(); g.Status.ActiveSite != "pdx" || g.Status.TopologyGeneration != 2 {
		t.Fatalf("after the budget: %s/%d", g.Status.ActiveSite, g.Status.TopologyGeneration)
	}
	//lint:ignore SA1019 Requeue marks "probe again now" (see Reconcile)
	if !res.Requeue || res.Priority == nil || *res.Priority != 0 {
		t.Fatalf("the promotion's pass asked for %+v, want a requeue at once at ordinary priority", res)
	}
	if r := f.runOf("op-1"); r.Status.Outcome != bloodravenv1alpha1.DeployRunRunning {
		t.Fatalf("the promotion's pass wrote the run's history: %+v", r.Status)
	}
	if p := f.database().Status.PendingVerification; p != nil {
		t.Fatalf("the promotion's pass closed the gate: %+v", p)
	}
	if len(f.events("DeploymentLeaseRevoked", 1)) != 1 {
		t.Fatal("the promotion's pass did not announce the revocation")
	}

	f.reconcile()
	if r := f.runOf("op-1"); r.Status.Outcome != bloodravenv1alpha1.DeployRunRevoked || r.Status.RevocationReason != "topology_changed" {
		t.Fatalf("run after the next pass: %+v", r.Status)
	}
	if p := f.database().Status.PendingVerification; p == nil || p.OperationID != "op-1" || p.Reason != "topology_changed" {
		t.Fatalf("pendingVerification after the next pass: %+v", p)
	}
	if r := f.renew("migration", "op-1", tok); r.status != http.StatusConflict || r.body["reason"] != "topology_changed" {
		t.Fatalf("renewal after the move: %d %v", r.status, r.body)
	}
}
