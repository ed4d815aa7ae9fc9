package controllers

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/topology/prober"
)

func TestBootstrapSetsGenerationOne(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	g := f.get()
	if g.Status.ActiveSite != "iad" || g.Status.TopologyGeneration != 1 || g.Status.Transition != nil {
		t.Fatalf("after bootstrap: %s/%d transition %v", g.Status.ActiveSite, g.Status.TopologyGeneration, g.Status.Transition)
	}
	if !meta.IsStatusConditionTrue(g.Status.Conditions, bloodravenv1alpha1.ConditionReady) || !g.Status.Health.ReplicationRunning {
		t.Fatalf("conditions %+v health %+v", g.Status.Conditions, g.Status.Health)
	}
	if len(f.events("Bootstrapped", 1)) != 1 {
		t.Fatal("no Bootstrapped event")
	}
}

func TestBootstrapRevokesLeasesGrantedBeforeIt(t *testing.T) {
	f := newFixture(t, true)
	tok, _ := f.grant("migration", "early", 30) // generation 0
	f.settle()
	r := f.renew("migration", "early", tok)
	if r.status != http.StatusConflict || r.body["reason"] != "topology_changed" || r.body["topologyGeneration"] != float64(1) {
		t.Fatalf("renewal after bootstrap: %d %v", r.status, r.body)
	}
}

func TestWithoutADriverTheGroupReportsNoPrimary(t *testing.T) {
	f := newFixture(t, false)
	f.settle()
	g := f.get()
	if g.Status.ActiveSite != "" || g.Status.TopologyGeneration != 0 {
		t.Fatalf("pretended a primary: %s/%d", g.Status.ActiveSite, g.Status.TopologyGeneration)
	}
	if !meta.IsStatusConditionTrue(g.Status.Conditions, bloodravenv1alpha1.ConditionNoPrimary) || g.Status.Health.Ready {
		t.Fatalf("conditions %+v", g.Status.Conditions)
	}
}

// The spec's scenario: a planned failover requested during a live hold is
// deferred until the hold's expiry, follows its renewals, proceeds as soon
// as the hold is released, bumps the generation, and the migration holder's
// next renewal is 409 revoked topology_changed.
func TestPlannedFailoverDefersBehindAHoldAndFencesTheMigration(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	migTok, _ := f.grant("migration", "op-1", 30)
	holdTok, holdExp := f.grant("failover-hold", "op-1", 30)

	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
		g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: "req-42", TargetSite: "pdx"}
	})
	res := f.settle()
	g := f.get()
	pf := g.Status.PlannedFailover
	if pf == nil || pf.Phase != bloodravenv1alpha1.PlannedFailoverPhaseDeferred || pf.Reason != "DeploymentHold" || pf.Admission == nil ||
		pf.Admission.DeferReason != "DeploymentHold" || !pf.Admission.RetryTime.Time.Equal(holdExp) {
		t.Fatalf("planned failover = %+v (admission %+v), want Deferred/DeploymentHold until %v", pf, pf.Admission, holdExp)
	}
	mustContain(t, pf.Admission.Message, "op-1", "counter-app")
	if want := holdExp.Sub(f.clock.Now()); res.RequeueAfter < want || res.RequeueAfter > want+time.Second {
		t.Fatalf("requeue after %v, want just after the hold's expiry (%v)", res.RequeueAfter, want)
	}
	if g.Status.Reservation != nil || g.Status.TopologyGeneration != 1 {
		t.Fatalf("deferred but reservation %+v generation %d", g.Status.Reservation, g.Status.TopologyGeneration)
	}
	if f.deferredCount(bloodravenv1alpha1.OperationPlannedFailover) != 1 {
		t.Fatalf("deferred counter = %v", f.deferredCount(bloodravenv1alpha1.OperationPlannedFailover))
	}
	ev := f.events("PlannedFailoverDeferred", 1)
	if len(ev) != 1 {
		t.Fatalf("%d PlannedFailoverDeferred events", len(ev))
	}
	mustContain(t, ev[0].Message, "op-1", "counter-app")
	stable := f.call(http.MethodGet, "", nil)
	if stable.body["stable"] != false || stable.body["unstableReason"] != "PlannedFailoverDeferred" {
		t.Fatalf("GET during the deferral: %v", stable.body)
	}

	// A renewal moves retryTime; the deferral is not counted again.
	f.clock.Step(10 * time.Second)
	r := f.renew("failover-hold", "op-1", holdTok)
	if r.status != 200 {
		t.Fatalf("renew hold: %d %v", r.status, r.body)
	}
	f.renew("migration", "op-1", migTok)
	newExp, _ := time.Parse(time.RFC3339Nano, r.body["expiresAt"].(string))
	f.settle()
	pf = f.get().Status.PlannedFailover
	if pf.Phase != bloodravenv1alpha1.PlannedFailoverPhaseDeferred || !pf.Admission.RetryTime.Time.Equal(newExp) {
		t.Fatalf("after renewal: %+v retry %v, want %v", pf, pf.Admission.RetryTime, newExp)
	}
	if f.deferredCount(bloodravenv1alpha1.OperationPlannedFailover) != 1 {
		t.Fatalf("deferred counter = %v after a renewal, want still 1", f.deferredCount(bloodravenv1alpha1.OperationPlannedFailover))
	}

	// Release: the very next reconcile proceeds.
	if r := f.call(http.MethodDelete, "/leases/failover-hold/op-1", nil, "X-Lease-Token", holdTok); r.status != 204 {
		t.Fatalf("release: %d", r.status)
	}
	f.reconcile()
	g = f.get()
	if g.Status.PlannedFailover.Phase != bloodravenv1alpha1.PlannedFailoverPhaseCompleted || g.Status.ActiveSite != "pdx" || g.Status.TopologyGeneration != 2 {
		t.Fatalf("one reconcile after release: phase %s active %s generation %d", g.Status.PlannedFailover.Phase, g.Status.ActiveSite, g.Status.TopologyGeneration)
	}
	if g.Status.Reservation != nil || g.Status.Transition != nil {
		t.Fatalf("left reservation %+v transition %+v", g.Status.Reservation, g.Status.Transition)
	}
	if !slices.Contains(f.driver.Calls, "promote pdx 2 planned=true") || f.driver.Generation(g, "pdx") != 2 {
		t.Fatalf("driver calls %v", f.driver.Calls)
	}
	r = f.renew("migration", "op-1", migTok)
	if r.status != http.StatusConflict || r.body["error"] != "revoked" || r.body["reason"] != "topology_changed" || r.body["topologyGeneration"] != float64(2) {
		t.Fatalf("holder's renewal after the failover: %d %v", r.status, r.body)
	}
	ev = f.events("DeploymentLeaseRevoked", 1)
	if len(ev) == 0 {
		t.Fatal("no DeploymentLeaseRevoked event")
	}
	mustContain(t, ev[0].Message, "topology_changed", "topologyGeneration 2", "op-1")
}

func TestPlannedFailoverProceedsWhenTheHoldLapses(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	f.grant("migration", "op-1", 30)
	_, exp := f.grant("failover-hold", "op-1", 30)
	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
		g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: "req-1", TargetSite: "pdx"}
	})
	res := f.settle()
	f.clock.Step(res.RequeueAfter) // the requeue the controller asked for
	if !f.clock.Now().After(exp) {
		t.Fatalf("requeue at %v is not after the expiry %v", f.clock.Now(), exp)
	}
	f.reconcile()
	if g := f.get(); g.Status.ActiveSite != "pdx" || g.Status.PlannedFailover.Phase != bloodravenv1alpha1.PlannedFailoverPhaseCompleted {
		t.Fatalf("after the lapse: %s %s", g.Status.ActiveSite, g.Status.PlannedFailover.Phase)
	}
}

func TestAMigrationLeaseAloneDefersNothing(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	f.grant("migration", "op-1", 120)
	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
		g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: "req-1", TargetSite: "pdx"}
	})
	f.reconcile()
	if g := f.get(); g.Status.ActiveSite != "pdx" || g.Status.TopologyGeneration != 2 {
		t.Fatalf("planned failover with only a migration lease: %s/%d", g.Status.ActiveSite, g.Status.TopologyGeneration)
	}
}

// Emergency failover never reads leases: with a live hold, the reconcile at
// the end of the detection budget promotes at once and revokes both leases.
func TestEmergencyFailoverIgnoresHolds(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	migTok, _ := f.grant("migration", "op-1", 120)
	holdTok, _ := f.grant("failover-hold", "op-1", 120)
	f.driver.Kill(f.group, "iad")

	res := f.settle()
	g := f.get()
	// The budget, from the mark rounded up to the second the status keeps.
	if g.Status.PrimaryLostAt == nil || res.RequeueAfter < 30*time.Second || res.RequeueAfter >= 31*time.Second {
		t.Fatalf("primary lost: lostAt %v requeue %v, want the 30 s budget", g.Status.PrimaryLostAt, res.RequeueAfter)
	}
	f.clock.Step(res.RequeueAfter)
	f.reconcile() // one requeue: the hold (live for 90 more seconds) does not delay it
	g = f.get()
	if g.Status.ActiveSite != "pdx" || g.Status.TopologyGeneration != 2 || g.Status.PrimaryLostAt != nil {
		t.Fatalf("after the budget: %s/%d lost %v", g.Status.ActiveSite, g.Status.TopologyGeneration, g.Status.PrimaryLostAt)
	}
	if !slices.Contains(f.driver.Calls, "promote pdx 2 planned=false") {
		t.Fatalf("driver calls %v", f.driver.Calls)
	}
	for kind, tok := range map[string]string{"migration": migTok, "failover-hold": holdTok} {
		if r := f.renew(kind, "op-1", tok); r.status != http.StatusConflict || r.body["reason"] != "topology_changed" {
			t.Fatalf("%s after the emergency: %d %v", kind, r.status, r.body)
		}
	}
	if len(f.events("EmergencyFailover", 1)) != 1 {
		t.Fatal("no EmergencyFailover event")
	}

	// The old primary returns writable: it is fenced before anything else.
	f.driver.Revive(f.group, "iad")
	f.settle()
	fenced, rejoined := slices.Index(f.driver.Calls, "fence iad"), slices.Index(f.driver.Calls, "rejoin iad pdx")
	if fenced < 0 || rejoined < fenced {
		t.Fatalf("returning primary must be fenced, then re-pointed: %v", f.driver.Calls)
	}
	g = f.get()
	if g.Status.ActiveSite != "pdx" || g.Status.TopologyGeneration != 2 {
		t.Fatalf("fencing moved the fence: %s/%d", g.Status.ActiveSite, g.Status.TopologyGeneration)
	}
	if len(f.events("SiteFenced", 1)) != 1 {
		t.Fatal("no SiteFenced event")
	}
}

// The mark is stored to the second (metav1.Time), rounded up: truncated, it
// would start the budget up to a second before the loss was seen, and the
// emergency promotion would come that much early.
func TestTheStoredMarkNeverShortensTheDetectionBudget(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	// 900 ms into a second: what truncation to the second would lose.
	f.clock.SetTime(f.clock.Now().Truncate(time.Second).Add(time.Second + 900*time.Millisecond))
	f.driver.Kill(f.group, "iad")
	f.settle()
	lostAt := f.clock.Now()
	g := f.get()
	if g.Status.PrimaryLostAt == nil || g.Status.PrimaryLostAt.Time.Before(lostAt) || g.Status.PrimaryLostAt.Time.Sub(lostAt) >= time.Second {
		t.Fatalf("stored mark %v, want within the second after %v", g.Status.PrimaryLostAt, lostAt)
	}
	stored := g.Status.PrimaryLostAt.Time
	f.clock.Step(29500 * time.Millisecond) // 0.5 s short of the 30-s budget
	f.reconcile()
	if g := f.get(); g.Status.ActiveSite != "iad" || g.Status.Transition != nil {
		t.Fatalf("promoted %s after the loss, inside the budget: %s, transition %+v", f.clock.Since(lostAt), g.Status.ActiveSite, g.Status.Transition)
	}
	f.clock.SetTime(stored.Add(30 * time.Second))
	f.reconcile()
	if g := f.get(); g.Status.ActiveSite != "pdx" {
		t.Fatalf("not promoted when the budget from the stored mark ran out: %s", g.Status.ActiveSite)
	}
}

// The budget counts from the prober's first failed probe of the current
// run, not from the reconcile that gets to the group (under a lost site, a
// thousand groups queue for their turn): a reconcile 3 s late marks the
// loss at the probe's time, and one that comes after the whole budget
// promotes at once, without a mark.
func TestTheBudgetCountsFromTheProbersFirstFailedProbe(t *testing.T) {
	lostFor := func(t *testing.T, late time.Duration) (*fixture, time.Time, ctrl.Result) {
		f := newFixture(t, true)
		f.rec.Prober = &prober.Prober{Driver: f.driver, Clock: f.clock, Interval: time.Second}
		f.settle()
		// On a whole second, so that the mark (kept to the second) is the
		// probe's time itself.
		f.clock.SetTime(f.clock.Now().Truncate(time.Second).Add(time.Second))
		f.driver.Kill(f.group, "iad")
		f.clock.Step(2 * time.Second) // what the prober saw before no longer stands in
		first := f.clock.Now()
		if sites, err := f.rec.Prober.Probe(f.ctx, f.get()); err != nil || sites[0].Reachable {
			t.Fatalf("the prober's probe: %+v %v", sites, err)
		}
		f.clock.Step(late)
		return f, first, f.reconcile()
	}
	t.Run("a late reconcile marks the first failed probe", func(t *testing.T) {
		f, first, res := lostFor(t, 3*time.Second)
		if g := f.get(); g.Status.PrimaryLostAt == nil || !g.Status.PrimaryLostAt.Time.Equal(first) || res.RequeueAfter != 27*time.Second {
			t.Fatalf("mark %v, requeue %v; want %v and the 27 s left", g.Status.PrimaryLostAt, res.RequeueAfter, first)
		}
		f.clock.Step(27 * time.Second)
		f.reconcile()
		if g := f.get(); g.Status.ActiveSite != "pdx" {
			t.Fatalf("not promoted 30 s after the first failed probe: %s", g.Status.ActiveSite)
		}
	})
	t.Run("a reconcile after the whole budget promotes without a mark", func(t *testing.T) {
		f, _, _ := lostFor(t, 30*time.Second)
		if g := f.get(); g.Status.ActiveSite != "pdx" || g.Status.TopologyGeneration != 2 || g.Status.PrimaryLostAt != nil {
			t.Fatalf("after one reconcile: %s/%d, mark %v", g.Status.ActiveSite, g.Status.TopologyGeneration, g.Status.PrimaryLostAt)
		}
		if len(f.events("EmergencyFailover", 1)) != 1 {
			t.Fatal("no EmergencyFailover event")
		}
	})
}

func TestRevokeAnnotationRevokesEverythingAndIsRemoved(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	migTok, _ := f.grant("migration", "op-1", 60)
	holdTok, _ := f.grant("failover-hold", "op-1", 60)
	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
		g.Annotations = map[string]string{bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation: "incident-123"}
	})
	f.settle()
	g := f.get()
	if _, ok := g.Annotations[bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation]; ok {
		t.Fatal("annotation not removed")
	}
	for kind, tok := range map[string]string{"migration": migTok, "failover-hold": holdTok} {
		if r := f.renew(kind, "op-1", tok); r.status != http.StatusConflict || r.body["reason"] != "operator_revoked" {
			t.Fatalf("%s: %d %v", kind, r.status, r.body)
		}
	}
	ev := f.events("DeploymentLeaseRevoked", 1)
	if len(ev) != 1 {
		t.Fatalf("%d events", len(ev))
	}
	mustContain(t, ev[0].Message, "operator_revoked", "op-1", "topologyGeneration 1")
	// Idempotent: another pass revokes nothing more and emits nothing more.
	f.settle()
	time.Sleep(time.Second) // the recorder is asynchronous: give a stray event time to land
	if n := len(f.events("DeploymentLeaseRevoked", 0)); n != 1 {
		t.Fatalf("%d revocation events after a second pass", n)
	}
	// The mutex is free for a new operation.
	f.grant("migration", "op-2", 30)
}

func TestExpiredLeasesAreMarkedExpired(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	f.grant("migration", "op-1", 5)
	f.clock.Step(6 * time.Second)
	f.settle()
	o, err := f.rec.Leases.Get(f.ctx, f.ns, leases.MigrationName("playground"), true)
	if err != nil || o.Record.State != leases.StateExpired || *o.Lease.Spec.LeaseDurationSeconds != 1 {
		t.Fatalf("record %+v err %v", o.Record, err)
	}
}

func TestOrderedUpdateAndRestoreDeferAndBumpTheGeneration(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	f.grant("migration", "op-1", 30)
	holdTok, _ := f.grant("failover-hold", "op-1", 30)
	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) { g.Spec.UpdateRevision = "r7" })
	f.settle()
	if g := f.get(); g.Status.UpdatePhase != bloodravenv1alpha1.PhaseDeferred || f.deferredCount(bloodravenv1alpha1.OperationOrderedUpdate) != 1 {
		t.Fatalf("ordered update during a hold: phase %q count %v", g.Status.UpdatePhase, f.deferredCount(bloodravenv1alpha1.OperationOrderedUpdate))
	}
	f.call(http.MethodDelete, "/leases/failover-hold/op-1", nil, "X-Lease-Token", holdTok)
	f.settle()
	g := f.get()
	if g.Status.UpdatePhase != bloodravenv1alpha1.PhaseCompleted || g.Status.UpdatedRevision != "r7" || g.Status.ActiveSite != "pdx" || g.Status.TopologyGeneration != 2 {
		t.Fatalf("ordered update: phase %q rev %q %s/%d", g.Status.UpdatePhase, g.Status.UpdatedRevision, g.Status.ActiveSite, g.Status.TopologyGeneration)
	}
	if !slices.Contains(f.driver.Calls, "update pdx r7") || !slices.Contains(f.driver.Calls, "update iad r7") {
		t.Fatalf("driver calls %v", f.driver.Calls)
	}

	// Restore in place of the active site: a same-site promotion, announced.
	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
		g.Spec.RestoreInPlace = &bloodravenv1alpha1.RestoreInPlaceRequest{ID: "restore-1"}
	})
	f.settle()
	g = f.get()
	if g.Status.RestoreInPlace != bloodravenv1alpha1.PhaseCompleted || g.Status.ActiveSite != "pdx" || g.Status.TopologyGeneration != 3 {
		t.Fatalf("restore in place: phase %q %s/%d", g.Status.RestoreInPlace, g.Status.ActiveSite, g.Status.TopologyGeneration)
	}
	if !slices.Contains(f.driver.Calls, "restore pdx restore-1") {
		t.Fatalf("driver calls %v", f.driver.Calls)
	}
}

func TestDeletingTheGroupDeletesLeasesAndTombstones(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	tok, _ := f.grant("migration", "op-1", 30)
	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
		g.Annotations = map[string]string{bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation: ""}
	})
	f.settle()
	f.renew("migration", "op-1", tok)
	f.grant("migration", "op-2", 30)
	var before coordinationv1.LeaseList
	if err := env.Client.List(f.ctx, &before, client.InNamespace(f.ns)); err != nil || len(before.Items) < 2 {
		t.Fatalf("leases before deletion: %d %v", len(before.Items), err)
	}
	if err := env.Client.Delete(f.ctx, f.get()); err != nil {
		t.Fatal(err)
	}
	f.reconcile()
	var after coordinationv1.LeaseList
	if err := env.Client.List(f.ctx, &after, client.InNamespace(f.ns)); err != nil {
		t.Fatal(err)
	}
	if len(after.Items) != 0 {
		t.Fatalf("%d leases left after the group was deleted", len(after.Items))
	}
	if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(f.group), &bloodravenv1alpha1.MysqlFailoverGroup{}); err == nil {
		t.Fatal("group still present: finalizer not released")
	}
}

// A hold grant racing an admission never lets both proceed: either the
// grant succeeds and the failover is deferred, or the failover proceeds and
// the grant is refused (423) or the hold is gone before the promotion.
func TestHoldGrantsRacingAdmissionsNeverBothProceed(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	sites := []string{"pdx", "iad"}
	granted, promoted := 0, 0
	const rounds = 30
	for round := 0; round < rounds; round++ {
		op := "op-" + strings.Repeat("r", 1+round%5) + "-" + string(rune('a'+round%26))
		migTok, _ := f.grant("migration", op, 120)
		before := f.get().Status.TopologyGeneration
		target := sites[round%2]
		f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
			g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: "race-" + op, TargetSite: target}
		})
		var wg sync.WaitGroup
		var hold apiResp
		var recErr error
		wg.Add(2)
		delay := time.Duration(round%10) * 15 * time.Millisecond
		go func() {
			defer wg.Done()
			if round%2 == 1 {
				time.Sleep(delay)
			}
			hold = f.call(http.MethodPost, "/leases", map[string]any{"kind": "failover-hold", "operationId": op, "instance": "counter-app", "ttlSeconds": 120})
		}()
		go func() {
			defer wg.Done()
			// Stagger the starts so that either side can win the race.
			if round%2 == 0 {
				time.Sleep(delay)
			}
			_, recErr = f.rec.Reconcile(f.ctx, reqFor(f))
		}()
		wg.Wait()
		if recErr != nil && !strings.Contains(recErr.Error(), "conflict") && !strings.Contains(recErr.Error(), "modified") {
			t.Fatalf("round %d: reconcile: %v", round, recErr)
		}
		after := f.get()
		holdGranted := hold.status == http.StatusCreated
		moved := after.Status.TopologyGeneration != before
		if holdGranted && moved {
			// Allowed only if the hold was withdrawn or revoked before it could
			// defer: the grant answered 201, so it must still be live now.
			o, _ := f.rec.Leases.Get(f.ctx, f.ns, leases.HoldName("playground", op), true)
			t.Fatalf("round %d: hold granted (record %+v) and the failover proceeded (generation %d -> %d)", round, o.Record, before, after.Status.TopologyGeneration)
		}
		if !holdGranted && hold.status != http.StatusLocked && hold.status != http.StatusConflict {
			t.Fatalf("round %d: hold answered %d %v", round, hold.status, hold.body)
		}
		if holdGranted {
			granted++
		}
		if moved {
			promoted++
		}
		// Clean up: release the hold and the mutex, let the failover finish.
		if holdGranted {
			f.call(http.MethodDelete, "/leases/failover-hold/"+op, nil, "X-Lease-Token", hold.body["token"].(string))
		}
		f.settle()
		f.call(http.MethodDelete, "/leases/migration/"+op, nil, "X-Lease-Token", migTok)
		if pf := f.get().Status.PlannedFailover; pf.Phase != bloodravenv1alpha1.PlannedFailoverPhaseCompleted {
			t.Fatalf("round %d: failover did not complete after the race: %+v", round, pf)
		}
	}
	t.Logf("%d rounds: hold granted (failover deferred) in %d, failover first (hold refused) in %d, both backed off in %d",
		rounds, granted, promoted, rounds-granted-promoted)
}
