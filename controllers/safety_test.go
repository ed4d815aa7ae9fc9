package controllers

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/deployapi"
	"github.com/shipstream/bloodraven/internal/testenv"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/store/leasestore"
	"github.com/shipstream/bloodraven/topology"
)

// rounds reconciles n times, letting the fake clock run as the controller
// would wait (its requeue, or a backoff after an error), and calls check
// after each round.
func (f *fixture) rounds(n int, check func(round int)) {
	f.t.Helper()
	for i := 0; i < n; i++ {
		res, err := f.reconcileTolerant()
		check(i)
		switch {
		case err != nil: // the controller would retry after a backoff
			f.clock.Step(10 * time.Second)
		case res.RequeueAfter > 0:
			f.clock.Step(min(res.RequeueAfter, 20*time.Second))
		}
	}
}

// admitFailingUpdate requests an ordered update (revision r7) that is
// admitted and then cannot update pdx: every reconcile's step fails. (With
// pdx unreachable it would not be admitted at all: a planned operation
// waits until it can fence every other site.)
func (f *fixture) admitFailingUpdate() {
	f.t.Helper()
	f.driver.FailUpdates(f.group, "pdx", errors.New("simulated rollout failure"))
	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) { g.Spec.UpdateRevision = "r7" })
	for i := 0; i < 3; i++ {
		_, _ = f.reconcileTolerant()
	}
}

// reconcileTolerant runs a reconcile and returns its error (lease
// bookkeeping may fail here on purpose).
func (f *fixture) reconcileTolerant() (ctrl.Result, error) {
	return f.rec.Reconcile(f.ctx, reqFor(f))
}

// Defect 1: nothing about leases can delay a safety path. With every
// deployment Lease update denied (and so lease bookkeeping failing on every
// pass), killing the primary still leads to an emergency failover within the
// detection budget, and the fence still ends the old leases.
func TestEmergencyFailoverWhileLeaseUpdatesAreDenied(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	migTok, _ := f.grant("migration", "op-1", 120)
	f.grant("failover-hold", "op-1", 5)
	testenv.DenyLeaseUpdates(t, f.ctx, env.Client, f.ns, leasestore.LabelDeployLease)
	f.clock.Step(6 * time.Second) // the hold lapsed: bookkeeping must record it, and is denied

	f.driver.Kill(f.group, "iad")
	start := f.clock.Now()
	for i := 0; i < 20 && f.get().Status.TopologyGeneration != 2; i++ {
		res, _ := f.reconcileTolerant()
		//lint:ignore SA1019 Requeue marks "probe again now" (see Reconcile)
		if res.RequeueAfter > 0 && !res.Requeue {
			f.clock.Step(min(res.RequeueAfter, 10*time.Second))
		}
	}
	g := f.get()
	if g.Status.ActiveSite != "pdx" || g.Status.TopologyGeneration != 2 {
		t.Fatalf("no emergency failover while Lease updates are denied: active %s generation %d", g.Status.ActiveSite, g.Status.TopologyGeneration)
	}
	if waited := f.clock.Since(start); waited > 40*time.Second {
		t.Fatalf("promoted %v after the kill; budget 30 s", waited)
	}
	if r := f.renew("migration", "op-1", migTok); r.status != http.StatusConflict || r.body["error"] != "revoked" {
		t.Fatalf("the old mutex after the failover: %d %v", r.status, r.body)
	}
	if testutil.ToFloat64(f.metrics.BookkeepingErrors.WithLabelValues(f.ns, "playground")) == 0 {
		t.Fatal("the denied bookkeeping was not counted")
	}
}

// Defect 4: a reservation never outlives its request.
func TestRemovingARequestReleasesItsReservation(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	f.admitFailingUpdate()
	if g := f.get(); g.Status.Reservation == nil || g.Status.UpdatePhase != bloodravenv1alpha1.PhaseUpdatingReplicas {
		t.Fatalf("setup: reservation %+v phase %s", g.Status.Reservation, g.Status.UpdatePhase)
	}
	f.grant("migration", "op-1", 30)
	if r := f.call(http.MethodPost, "/leases", map[string]any{"kind": "failover-hold", "operationId": "op-1", "instance": "counter-app"}); r.status != http.StatusLocked {
		t.Fatalf("setup: a hold while reserved: %d %v", r.status, r.body)
	}

	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) { g.Spec.UpdateRevision = "" })
	_, _ = f.reconcileTolerant()
	g := f.get()
	if g.Status.Reservation != nil || g.Status.UpdatePhase != bloodravenv1alpha1.PhaseFailed {
		t.Fatalf("after the request was removed: reservation %+v phase %s", g.Status.Reservation, g.Status.UpdatePhase)
	}
	if r := f.call(http.MethodPost, "/leases", map[string]any{"kind": "failover-hold", "operationId": "op-1", "instance": "counter-app"}); r.status != http.StatusCreated {
		t.Fatalf("a hold after the request was removed: %d %v", r.status, r.body)
	}

	// A deferred planned failover whose request is removed ends too, so the
	// group can become stable again.
	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
		g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: "req-1", TargetSite: "iad"}
	})
	f.driver.Revive(f.group, "pdx")
	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
		g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: "req-2", TargetSite: "pdx"}
	})
	f.settle()
	if g := f.get(); g.Status.PlannedFailover.Phase != bloodravenv1alpha1.PlannedFailoverPhaseDeferred {
		t.Fatalf("setup: planned failover %s", g.Status.PlannedFailover.Phase)
	}
	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) { g.Spec.PlannedFailover = nil })
	f.settle()
	if g := f.get(); g.Status.PlannedFailover.Phase != bloodravenv1alpha1.PlannedFailoverPhaseFailed || g.Status.PlannedFailover.Reason != "RequestWithdrawn" {
		t.Fatalf("a withdrawn planned failover: %+v", g.Status.PlannedFailover)
	}
}

// faultyDriver injects failures into promotions; everything else is the
// wrapped driver's.
type faultyDriver struct {
	topology.Driver
	promote func(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, site string, gen int64, planned bool) error
}

func (d *faultyDriver) Promote(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, site string, gen int64, planned bool) error {
	if d.promote != nil {
		return d.promote(ctx, g, site, gen, planned)
	}
	return d.Driver.Promote(ctx, g, site, gen, planned)
}

func (d *faultyDriver) Rejoin(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, site, primary string) error {
	return d.Driver.(topology.Rejoiner).Rejoin(ctx, g, site, primary)
}

// Defect 5 (simulated sites): a started transition completes or is rolled
// back with its target fenced first; never two writable sites.
func TestInterruptedTransitionsNeverLeaveTwoWritableSites(t *testing.T) {
	writable := func(f *fixture) []string {
		var out []string
		for _, s := range []string{"iad", "pdx"} {
			if f.driver.Writable(f.group, s) {
				out = append(out, s)
			}
		}
		return out
	}
	run := func(f *fixture, rounds int) {
		f.rounds(rounds, func(i int) {
			if w := writable(f); len(w) > 1 {
				f.t.Fatalf("round %d: two writable sites %v", i, w)
			}
		})
	}
	t.Run("the target dies right after it was opened: complete, never reopen the old primary", func(t *testing.T) {
		f := newFixture(t, true)
		f.settle()
		fd := &faultyDriver{Driver: f.driver}
		fd.promote = func(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, site string, gen int64, planned bool) error {
			if err := f.driver.Promote(ctx, g, site, gen, planned); err != nil {
				return err
			}
			fd.promote = nil
			f.driver.Kill(g, site) // the connection drops after the target is writable
			return errors.New("connection lost")
		}
		f.rec.Driver, f.rec.PromoteTimeout = fd, time.Minute
		f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
			g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: "req-1", TargetSite: "pdx"}
		})
		run(f, 12) // minutes pass; pdx stays unreachable
		if g := f.get(); g.Status.Transition == nil || f.driver.Writable(g, "iad") {
			t.Fatalf("while the target is unreachable: transition %+v, iad writable %v", g.Status.Transition, f.driver.Writable(g, "iad"))
		}
		f.driver.Revive(f.group, "pdx")
		run(f, 4)
		if g := f.get(); g.Status.ActiveSite != "pdx" || g.Status.TopologyGeneration != 2 || g.Status.Transition != nil {
			t.Fatalf("the transition did not complete: %s/%d %+v", g.Status.ActiveSite, g.Status.TopologyGeneration, g.Status.Transition)
		}
	})
	t.Run("a promotion that keeps failing is rolled back: target fenced, old primary reopened", func(t *testing.T) {
		f := newFixture(t, true)
		f.settle()
		var attempts atomic.Int32
		f.rec.Driver = &faultyDriver{Driver: f.driver, promote: func(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, site string, gen int64, planned bool) error {
			if site != "pdx" { // reasserting the old primary works
				return f.driver.Promote(ctx, g, site, gen, planned)
			}
			attempts.Add(1)
			_ = f.driver.Fence(ctx, g, "iad") // a planned promotion fences the old primary first
			return errors.New("target did not catch up")
		}}
		f.rec.PromoteTimeout = time.Minute
		f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
			g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: "req-1", TargetSite: "pdx"}
		})
		run(f, 15)
		g := f.get()
		if !f.driver.Writable(g, "iad") || f.driver.Writable(g, "pdx") || g.Status.ActiveSite != "iad" || g.Status.TopologyGeneration != 1 || g.Status.Transition != nil {
			t.Fatalf("after %d failed promotions: iad writable %v, pdx writable %v, %s/%d, transition %+v", attempts.Load(),
				f.driver.Writable(g, "iad"), f.driver.Writable(g, "pdx"), g.Status.ActiveSite, g.Status.TopologyGeneration, g.Status.Transition)
		}
		if pf := g.Status.PlannedFailover; pf.Phase != bloodravenv1alpha1.PlannedFailoverPhaseFailed || pf.Reason != "PromotionRolledBack" {
			t.Fatalf("planned failover %+v", pf)
		}
		if len(f.events("TransitionRolledBack", 1)) == 0 {
			t.Fatal("no TransitionRolledBack event")
		}
	})
}

// flipClock reads before for its first n reads and after from then on: a
// clock that crosses an instant at a chosen point inside a reconcile.
type flipClock struct {
	mu            sync.Mutex
	before, after time.Time
	n, reads      int
}

func (c *flipClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	if c.reads <= c.n {
		return c.before
	}
	return c.after
}

func (c *flipClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Defect 6: a hold renewal that straddles its expiry while the controller
// admits a planned failover. The renewal is decided at the expiry instant
// (live) and its write is delayed; the controller's clock crosses the expiry
// at every possible point of its reconcile. Never may the renewal succeed
// and the failover proceed.
func TestHoldRenewalAcrossItsExpiryNeverRacesAnAdmission(t *testing.T) {
	for n := 0; n < 60; n++ {
		promoted, status, reads := straddle(t, n)
		if promoted && status == http.StatusOK {
			t.Fatalf("clock crossing after read %d: the hold renewal got 200 and the planned failover promoted", n)
		}
		if reads <= n { // the crossing is past the end of the reconcile: every point was tried
			t.Logf("%d crossing points tried", n)
			return
		}
	}
}

func straddle(t *testing.T, n int) (promoted bool, status int, reads int) {
	f := newFixture(t, true)
	f.settle()
	f.grant("migration", "op-1", 120)
	holdTok, expiry := f.grant("failover-hold", "op-1", 5)
	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
		g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: "req-1", TargetSite: "pdx"}
	})
	f.settle()
	if g := f.get(); g.Status.PlannedFailover.Phase != bloodravenv1alpha1.PlannedFailoverPhaseDeferred {
		t.Fatalf("setup: %s", g.Status.PlannedFailover.Phase)
	}

	// The renewal's write of the hold waits until released.
	holdName := leases.HoldName("playground", "op-1")
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	slow := intercepted(t, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if obj.GetName() == holdName {
				once.Do(func() { close(reached); <-release })
			}
			return c.Update(ctx, obj, opts...)
		},
	})
	api, err := deployapi.New(deployapi.Config{IsLeader: func() bool { return true }, Clock: f.clock, Kube: env.Kube, FairShare: roomyShare,
		API: env.Client, Leases: &leasestore.Store{Client: slow, API: env.Client, Clock: f.clock, Key: testRecordKey}, Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	f.api = api
	f.clock.SetTime(expiry) // live: expiry is now > expiresAt
	done := make(chan apiResp, 1)
	go func() { done <- f.renew("failover-hold", "op-1", holdTok) }()
	select {
	case <-reached:
	case r := <-done:
		t.Fatalf("setup: the renewal did not reach its write: %d %v", r.status, r.body)
	}

	// The delayed write lands while the controller promotes: after its
	// admission, before anything the promotion itself writes.
	var r apiResp
	var landed sync.Once
	let := func() { landed.Do(func() { close(release); r = <-done }) }
	f.rec.Driver = &faultyDriver{Driver: f.driver, promote: func(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, site string, gen int64, planned bool) error {
		let()
		return f.driver.Promote(ctx, g, site, gen, planned)
	}}
	clk := &flipClock{before: expiry, after: expiry.Add(time.Millisecond), n: n}
	f.rec.Clock = clk
	for i := 0; i < 3; i++ {
		_, _ = f.reconcileTolerant()
	}
	let() // no promotion: the write lands now
	g := f.get()
	return g.Status.TopologyGeneration == 2, r.status, clk.reads
}
