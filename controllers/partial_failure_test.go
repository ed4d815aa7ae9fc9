package controllers

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/topology"
)

func (f *fixture) revokedCount(reason string) float64 {
	return testutil.ToFloat64(f.metrics.Revoked.WithLabelValues(f.ns, "playground", reason))
}

// requestPlanned asks for a planned failover to pdx.
func (f *fixture) requestPlanned(id string) {
	f.t.Helper()
	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
		g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: id, TargetSite: "pdx"}
	})
}

// neverTwoWritable fails the test when the simulated iad and pdx are writable
// at once.
func (f *fixture) neverTwoWritable(when string) {
	f.t.Helper()
	if f.driver.Writable(f.group, "iad") && f.driver.Writable(f.group, "pdx") {
		f.t.Fatalf("%s: iad and pdx are both writable", when)
	}
}

// Defect 1 (issue 19): a planned promotion never opens a site while another
// may still be writable. At b60db83 the admission checked only the target,
// and the planned path fenced only the reachable sites: with iad
// unreachable, pdx was promoted and, once iad answered again, both were
// writable. Now the operation waits in Admitting, reason SiteUnreachable,
// naming iad, and writes no transition; once iad answers, it completes.
func TestPlannedFailoverWaitsForAnUnreachableSite(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	f.driver.Kill(f.group, "iad") // paused or partitioned: its flags (writable) are kept
	f.requestPlanned("req-1")
	for i := 0; i < 4; i++ { // 20 s, inside the 30 s detection budget
		_, _ = f.reconcileTolerant()
		f.neverTwoWritable("while iad is unreachable")
		g := f.get()
		pf := g.Status.PlannedFailover
		if g.Status.Transition != nil || g.Status.TopologyGeneration != 1 || pf == nil ||
			pf.Phase != bloodravenv1alpha1.PlannedFailoverPhaseAdmitting || pf.Reason != "SiteUnreachable" ||
			pf.Admission == nil || !strings.Contains(pf.Admission.Message, "site iad") {
			t.Fatalf("round %d: transition %+v, generation %d, planned failover %+v", i, g.Status.Transition, g.Status.TopologyGeneration, pf)
		}
		f.clock.Step(5 * time.Second)
	}
	f.driver.Revive(f.group, "iad")
	f.settle()
	f.neverTwoWritable("after iad returned")
	if g := f.get(); g.Status.ActiveSite != "pdx" || g.Status.TopologyGeneration != 2 || g.Status.PlannedFailover.Phase != bloodravenv1alpha1.PlannedFailoverPhaseCompleted {
		t.Fatalf("after iad returned: %s/%d %+v", g.Status.ActiveSite, g.Status.TopologyGeneration, g.Status.PlannedFailover)
	}
}

// probeThenLose is a driver whose probe sees every site, and which loses
// iad right after the probe once armed: the site drops out between the
// probe and the planned path's action.
type probeThenLose struct {
	topology.Driver
	lose func()
}

func (d *probeThenLose) Probe(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup) ([]topology.SiteState, error) {
	sites, err := d.Driver.Probe(ctx, g)
	if d.lose != nil {
		d.lose()
		d.lose = nil
	}
	return sites, err
}

func (d *probeThenLose) Rejoin(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, site, primary string) error {
	return d.Driver.(topology.Rejoiner).Rejoin(ctx, g, site, primary)
}

// Defect 1, the race: iad answers the probe, then drops out before the
// planned path fences it. No transition is written and pdx stays read-only.
func TestPlannedFailoverWritesNoTransitionWhenASiteDropsOutAfterTheProbe(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	d := &probeThenLose{Driver: f.driver}
	f.rec.Driver = d
	f.requestPlanned("req-1")
	d.lose = func() { f.driver.Kill(f.group, "iad") }
	_, _ = f.reconcileTolerant()
	f.neverTwoWritable("after the planned path met the lost site")
	g := f.get()
	if g.Status.Transition != nil || g.Status.TopologyGeneration != 1 || f.driver.Writable(f.group, "pdx") {
		t.Fatalf("transition %+v, generation %d, pdx writable %v", g.Status.Transition, g.Status.TopologyGeneration, f.driver.Writable(f.group, "pdx"))
	}
	if pf := g.Status.PlannedFailover; pf == nil || pf.Phase != bloodravenv1alpha1.PlannedFailoverPhaseAdmitting || pf.Reason != "SiteUnreachable" || g.Status.Reservation != nil {
		t.Fatalf("planned failover %+v, reservation %+v; want Admitting/SiteUnreachable and no reservation", pf, g.Status.Reservation)
	}
}

// Defect 2, the controller's side: a lease released after the move (by a
// release that raced the bookkeeping) is tombstoned by the bookkeeping.
// At b60db83 bookkeeping revoked only leases that were still live.
func TestBookkeepingRevokesALeaseReleasedAfterTheMove(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	tok, _ := f.grant("migration", "m2-x", 120)
	f.clock.Step(time.Second)
	f.moveStatus(2)
	f.clock.Step(time.Second)
	// The release was decided on the old generation and written after the
	// move, before any bookkeeping.
	obj, rec, err := f.rec.Leases.GetOwn(f.ctx, f.get(), leases.KindMigration, "m2-x", true)
	if err != nil || rec == nil || !leases.TokenMatches(tok, rec.TokenHash) {
		t.Fatalf("setup: %s %v", stateOf(rec), err)
	}
	if _, err := f.rec.Leases.Update(f.ctx, f.get(), obj, rec.Released(f.clock.Now())); err != nil {
		t.Fatal(err)
	}
	f.reconcile()
	if r := f.call(http.MethodPost, "/leases", map[string]any{"kind": "migration", "operationId": "m2-x", "instance": "counter-app"}); r.status != http.StatusConflict || r.body["error"] != "revoked" {
		t.Fatalf("re-grant after the bookkeeping: %d %v", r.status, r.body)
	}
	if n := len(f.events("DeploymentLeaseRevoked", 1)); n != 1 {
		t.Fatalf("%d DeploymentLeaseRevoked events, want 1", n)
	}
}

// moveStatus writes a new generation as a promotion does, without running
// the bookkeeping that follows it.
func (f *fixture) moveStatus(gen int64) {
	f.t.Helper()
	g := f.get()
	g.Status.TopologyGeneration = gen
	mt := metav1.NewMicroTime(f.clock.Now())
	g.Status.TopologyGenerationTime = &mt
	if err := env.Client.Status().Update(f.ctx, g); err != nil {
		f.t.Fatal(err)
	}
}

// Defect 4 (issue 19): every revocation is observable once, whoever wrote
// the tombstone. At b60db83 a renewal that found the move first wrote the
// tombstone, and the controller, finding nothing live, emitted no Event and
// counted nothing.
func TestARevocationWrittenByTheAPIIsAnnouncedOnce(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	tok, _ := f.grant("migration", "op-1", 120)
	f.moveStatus(2)
	if r := f.renew("migration", "op-1", tok); r.status != http.StatusConflict || r.body["error"] != "revoked" {
		t.Fatalf("renewal after the move: %d %v", r.status, r.body)
	}
	for i := 0; i < 3; i++ {
		f.reconcile()
	}
	f.events("DeploymentLeaseRevoked", 1)
	time.Sleep(300 * time.Millisecond) // the recorder is asynchronous: give a second Event the time to show
	events := f.events("DeploymentLeaseRevoked", 1)
	if len(events) != 1 || events[0].Count > 1 || !strings.Contains(events[0].Message, "op-1") {
		t.Fatalf("events %+v, want one naming op-1", events)
	}
	if n := f.revokedCount(leases.ReasonTopologyChanged); n != 1 {
		t.Fatalf("revocations counted %v, want 1", n)
	}
}

// Defect 5 (issue 19): a deferral ends with the authority that caused it.
// At b60db83 retryTime was the hold's expiry even when its mutex expired
// first, and an operation that took its lapsed mutex again brought its old
// hold back to life.
func TestADeferralEndsWithItsMutex(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	_, migExp := f.grant("migration", "op-1", 10)
	f.grant("failover-hold", "op-1", 120)
	f.requestPlanned("req-1")
	res := f.settle()
	g := f.get()
	pf := g.Status.PlannedFailover
	if pf.Phase != bloodravenv1alpha1.PlannedFailoverPhaseDeferred || pf.Admission == nil || pf.Admission.RetryTime == nil ||
		!pf.Admission.RetryTime.Time.Equal(migExp) {
		t.Fatalf("deferral %+v, want retryTime at the mutex's expiry %v", pf, migExp)
	}
	if res.RequeueAfter > 11*time.Second {
		t.Fatalf("requeue after %v; the mutex ends in 10 s", res.RequeueAfter)
	}
	// The mutex lapses; the operation takes it again before any reconcile.
	f.clock.Step(11 * time.Second)
	f.grant("migration", "op-1", 120)
	f.reconcile()
	if g := f.get(); g.Status.ActiveSite != "pdx" || g.Status.PlannedFailover.Phase != bloodravenv1alpha1.PlannedFailoverPhaseCompleted {
		t.Fatalf("the old hold came back to life: %s %+v", g.Status.ActiveSite, g.Status.PlannedFailover)
	}
}

// Defect 6 (issue 19): the lapsed-hold compare-and-swap runs on re-entry.
// At b60db83 it ran only when the reservation was newly written: if the
// confirmation or the promotion failed after that write, the next reconcile
// admitted without it.
func TestTheAdmissionConfirmsLapsedHoldsOnReEntry(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	f.grant("migration", "op-1", 120)
	f.grant("failover-hold", "op-1", 5)
	f.requestPlanned("req-1")
	g := f.get()
	g.Status.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverStatus{ID: "req-1", TargetSite: "pdx", Phase: bloodravenv1alpha1.PlannedFailoverPhaseAdmitting}
	g.Status.Reservation = &bloodravenv1alpha1.OperationReservation{Operation: bloodravenv1alpha1.OperationPlannedFailover, ID: "req-1", ReservedAt: metav1.NewTime(f.clock.Now())}
	if err := env.Client.Status().Update(f.ctx, g); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(10 * time.Second) // the hold lapsed; its record still says active
	sites, _ := f.driver.Probe(f.ctx, g)
	var st passOutcome
	ok, err := f.rec.admitPlanned(f.ctx, g, sites, &st, plannedRequest{op: bloodravenv1alpha1.OperationPlannedFailover, id: "req-1", target: "pdx"})
	if err != nil || !ok {
		t.Fatalf("admitPlanned: %v %v", ok, err)
	}
	_, hold, err := f.rec.Leases.GetOwn(f.ctx, g, leases.KindFailoverHold, "op-1", true)
	if err != nil || hold == nil || hold.State != leases.StateExpired {
		t.Fatalf("the lapsed hold after re-entry: %v (%v); want it recorded as expired", stateOf(hold), err)
	}
}

// Defect 8 (issue 19): the safety paths run until the group is gone. At
// b60db83 a group whose deletion waited on a finalizer got no probe, no
// emergency failover and no fencing.
func TestADeletingGroupKeepsItsSafetyPaths(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	g := f.get()
	controllerutil.AddFinalizer(g, "test.bloodraven.shipstream.io/keep") // the deletion waits on another finalizer
	if err := env.Client.Update(f.ctx, g); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g := &bloodravenv1alpha1.MysqlFailoverGroup{}
		if env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.group), g) == nil {
			controllerutil.RemoveFinalizer(g, "test.bloodraven.shipstream.io/keep")
			_ = env.Client.Update(context.Background(), g)
		}
	})
	if err := env.Client.Delete(f.ctx, f.get()); err != nil {
		t.Fatal(err)
	}
	f.driver.Kill(f.group, "iad")
	for i := 0; i < 10 && f.get().Status.ActiveSite != "pdx"; i++ {
		_, _ = f.reconcileTolerant()
		f.clock.Step(10 * time.Second)
	}
	if g := f.get(); g.Status.ActiveSite != "pdx" || g.Status.TopologyGeneration != 2 {
		t.Fatalf("a deleting group with a lost primary: %s/%d", g.Status.ActiveSite, g.Status.TopologyGeneration)
	}
	// The returning old primary is fenced.
	f.driver.Revive(f.group, "iad")
	_, _ = f.reconcileTolerant()
	f.neverTwoWritable("after iad returned to a deleting group")
}

func stateOf(r *leases.Record) string {
	if r == nil {
		return "absent"
	}
	return string(r.State)
}

// A planned transition resumed (after an operator crash) while another site
// is unreachable does not open the target past the lost site (review
// finding: Promote skipped a site it could not open, so a primary that came
// back writable but cut off from the operator stayed writable beside the
// new one). Nor does it wait for the site inside the transition, holding
// emergency failover (issue 35): it is rolled back at once, its target
// fenced, and the emergency path decides. Here iad answers again within
// the detection budget, and stays the primary.
func TestAResumedPlannedTransitionNeverSkipsALostSite(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	g := f.get()
	g.Status.Transition = &bloodravenv1alpha1.TopologyTransition{Operation: bloodravenv1alpha1.OperationPlannedFailover, TargetSite: "pdx", Generation: 2, StartedAt: metav1.NewTime(f.clock.Now())}
	if err := env.Client.Status().Update(f.ctx, g); err != nil {
		t.Fatal(err)
	}
	f.driver.Kill(f.group, "iad") // writable, and out of the operator's reach
	_, _ = f.reconcileTolerant()
	f.neverTwoWritable("after the resumed planned transition")
	g = f.get()
	if f.driver.Writable(f.group, "pdx") || g.Status.Transition != nil || g.Status.TopologyGeneration != 1 ||
		slices.ContainsFunc(f.driver.Calls, func(c string) bool { return strings.HasPrefix(c, "promote pdx") }) {
		t.Fatalf("pdx writable %v, transition %+v, generation %d, calls %v; want it rolled back without a promotion",
			f.driver.Writable(f.group, "pdx"), g.Status.Transition, g.Status.TopologyGeneration, f.driver.Calls)
	}
	f.driver.Revive(f.group, "iad")
	f.settle()
	f.neverTwoWritable("after iad returned")
	if g := f.get(); g.Status.ActiveSite != "iad" || g.Status.TopologyGeneration != 1 || g.Status.Transition != nil || !f.driver.Writable(g, "iad") {
		t.Fatalf("after iad returned: %s/%d %+v, iad writable %v", g.Status.ActiveSite, g.Status.TopologyGeneration, g.Status.Transition, f.driver.Writable(g, "iad"))
	}
}

// A re-grant of the mutex (same operation: a runner whose POST answer was
// lost) continues the operation's tenure: its failover-hold still defers.
// Only a take-over after a lapse starts a new tenure (TestADeferralEndsWithItsMutex).
func TestARegrantedMutexKeepsItsHold(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	f.grant("migration", "op-1", 120)
	f.grant("failover-hold", "op-1", 120)
	f.clock.Step(time.Second)
	f.grant("migration", "op-1", 120) // 200: re-grant, new token
	f.requestPlanned("req-1")
	f.settle()
	if g := f.get(); g.Status.ActiveSite != "iad" || g.Status.PlannedFailover.Phase != bloodravenv1alpha1.PlannedFailoverPhaseDeferred {
		t.Fatalf("after a re-grant of the mutex the hold deferred nothing: %s %+v", g.Status.ActiveSite, g.Status.PlannedFailover)
	}
}

// History is bounded (docs/leases.md, "Deployment leases"): an ended failover-hold is deleted once
// its ttl has passed after its expiry (policy.HoldForgotten), and its renewal answers 404 before and after; one that
// ended within its ttl is kept. Deploy cycles leave the mutex and nothing
// else.
func TestEndedHoldsAreForgottenAfterTheirTTL(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	holds := func() int {
		objs, err := f.rec.Leases.ListObjects(f.ctx, f.ns, "playground", true)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, o := range objs {
			if o.Record.Kind == leases.KindFailoverHold {
				n++
			}
		}
		return n
	}
	for i := 0; i < 5; i++ { // five deploy cycles
		op := fmt.Sprintf("op-%d", i)
		mutexTok, _ := f.grant("migration", op, 30)
		holdTok, _ := f.grant("failover-hold", op, 30)
		if r := f.call(http.MethodDelete, "/leases/failover-hold/"+op, nil, "X-Lease-Token", holdTok); r.status != 204 {
			t.Fatalf("release hold: %d %v", r.status, r.body)
		}
		if r := f.call(http.MethodDelete, "/leases/migration/"+op, nil, "X-Lease-Token", mutexTok); r.status != 204 {
			t.Fatalf("release mutex: %d %v", r.status, r.body)
		}
		if i == 0 {
			f.reconcile()
			if n := holds(); n != 1 {
				t.Fatalf("a hold released within its ttl was not kept: %d holds", n)
			}
			if r := f.renew("failover-hold", op, holdTok); r.status != http.StatusNotFound {
				t.Fatalf("renewal of a released hold: %d %v, want 404", r.status, r.body)
			}
		}
	}
	// The grants' expiry (30 s) and another ttl for the clocks' sake.
	f.clock.Step(61 * time.Second)
	f.reconcile()
	if n := holds(); n != 0 {
		t.Fatalf("%d ended holds left after their ttl, want 0", n)
	}
	if r := f.renew("failover-hold", "op-0", "not-the-token-but-it-does-not-matter"); r.status != http.StatusNotFound {
		t.Fatalf("renewal of a forgotten hold: %d %v, want 404 as before", r.status, r.body)
	}
}
