package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/topology"
)

// Issue 35, item 2: a planned operation never waits inside a persisted
// transition. A planned failover to pdx passes its fence, writes its
// transition and opens pdx; then iad, the old primary, hangs before the
// promotion is done with it. The transition is rolled back at once (pdx
// fenced read-only first), the planned failover returns to Admitting
// (SiteUnreachable, naming iad), and the emergency path promotes pdx within
// the detection budget plus 10 s of the hang (fake clock). Before the fix
// every reconcile resumed the transition and failed on iad for the promote
// timeout (2 min): writes were down and no emergency decision was taken.
//
// A failure that is a topology.UnreachableError naming iad (as FenceOthers
// reports it) is rolled back in the reconcile that failed. An untyped one
// (such as the SQL driver's error for a site it could not point at the new
// primary) is rolled back by the next reconcile, whose probe finds iad
// unreachable.
func TestAPlannedTransitionThatLosesASiteIsRolledBackAtOnce(t *testing.T) {
	const budget = 30 * time.Second // the fixture's failureDetectionSeconds
	tests := map[string]struct {
		// untyped hides the driver's UnreachableError behind a plain error.
		untyped bool
		// rollbackAfter is how many reconciles, counted from the one that
		// wrote the transition, may pass before the rollback.
		rollbackAfter int
	}{
		"an UnreachableError naming the hung site: rolled back in the same reconcile": {rollbackAfter: 1},
		"an untyped failure: rolled back by the next reconcile's probe":               {untyped: true, rollbackAfter: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, true)
			f.driver.HangCost = 20 * time.Millisecond // what a call to the hung iad costs, in real time
			f.settle()
			var hungAt time.Time
			fd := &faultyDriver{Driver: f.driver}
			fd.promote = func(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, site string, gen int64, planned bool) error {
				if !planned {
					return f.driver.Promote(ctx, g, site, gen, planned)
				}
				fd.promote = nil // only the first planned promotion is interrupted
				hungAt = f.clock.Now()
				f.driver.HangInPromote(g, "iad")
				err := f.driver.Promote(ctx, g, site, gen, planned)
				if tc.untyped && err != nil {
					err = fmt.Errorf("site iad: SET GLOBAL read_only=ON: %s", err.Error())
				}
				return err
			}
			f.rec.Driver = fd
			f.requestPlanned("req-1")

			rolledBack := false
			for i := 0; i < tc.rollbackAfter && !rolledBack; i++ {
				_, _ = f.reconcileTolerant()
				f.neverTwoWritable(fmt.Sprintf("reconcile %d after the request", i))
				g := f.get()
				rolledBack = !hungAt.IsZero() && g.Status.Transition == nil && g.Status.TopologyGeneration == 1
			}
			if !slices.Contains(f.driver.Calls, "promote pdx 2 planned=true interrupted: iad hung") {
				t.Fatalf("setup: the planned promotion was not interrupted: %v", f.driver.Calls)
			}
			g := f.get()
			if !rolledBack {
				t.Fatalf("not rolled back within %d reconcile(s): transition %+v, planned failover %+v", tc.rollbackAfter, g.Status.Transition, g.Status.PlannedFailover)
			}
			if f.driver.Writable(g, "pdx") || !slices.Contains(f.driver.Calls, "fence pdx") {
				t.Fatalf("the rolled-back target pdx is not fenced read-only: writable %v, calls %v", f.driver.Writable(g, "pdx"), f.driver.Calls)
			}
			pf := g.Status.PlannedFailover
			if pf == nil || pf.Phase != bloodravenv1alpha1.PlannedFailoverPhaseAdmitting || pf.Reason != policy.WaitSiteUnreachable ||
				pf.Admission == nil || !strings.Contains(pf.Admission.Message, "site iad") || g.Status.Reservation != nil {
				t.Fatalf("planned failover %+v, reservation %+v; want Admitting/SiteUnreachable naming iad, no reservation", pf, g.Status.Reservation)
			}
			if ev := f.events("TransitionRolledBack", 1); len(ev) != 1 || !strings.Contains(ev[0].Message, "site iad") {
				t.Fatalf("TransitionRolledBack events %+v, want one naming iad", ev)
			}

			// The emergency path decides: pdx within the budget of the hang.
			for i := 0; i < 30 && f.get().Status.TopologyGeneration != 2; i++ {
				res, _ := f.reconcileTolerant()
				f.neverTwoWritable(fmt.Sprintf("round %d while iad hangs", i))
				//lint:ignore SA1019 Requeue marks "probe again now" (see Reconcile)
				if !res.Requeue {
					f.clock.Step(min(max(res.RequeueAfter, time.Second), 5*time.Second))
				}
			}
			g = f.get()
			if g.Status.ActiveSite != "pdx" || g.Status.TopologyGeneration != 2 || !slices.Contains(f.driver.Calls, "promote pdx 2 planned=false") {
				t.Fatalf("no emergency promotion of pdx: %s/%d, calls %v", g.Status.ActiveSite, g.Status.TopologyGeneration, f.driver.Calls)
			}
			moved := g.Status.TopologyGenerationTime.Sub(hungAt)
			if moved > budget+10*time.Second {
				t.Fatalf("emergency promotion %v after iad hung; want within the detection budget (%v) + 10 s", moved, budget)
			}
			t.Logf("emergency promotion of pdx %v after iad hung (fake clock)", moved)

			// iad answers again: fenced, and the planned failover is done.
			f.driver.Revive(f.group, "iad")
			f.settle()
			f.neverTwoWritable("after iad returned")
			if g := f.get(); g.Status.ActiveSite != "pdx" || g.Status.PlannedFailover.Phase != bloodravenv1alpha1.PlannedFailoverPhaseCompleted {
				t.Fatalf("after iad returned: %s %+v", g.Status.ActiveSite, g.Status.PlannedFailover)
			}
		})
	}
}

// An emergency transition keeps its rule: a failed attempt, even one that
// names another site it could not reach, is counted and retried; only
// policy.MinPromoteFailures failures over the promote timeout roll it back
// (TestInterruptedTransitionsNeverLeaveTwoWritableSites).
func TestAnEmergencyTransitionIsRetriedWhenAnotherSiteFails(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	g := f.get()
	g.Status.Transition = &bloodravenv1alpha1.TopologyTransition{Operation: bloodravenv1alpha1.OperationEmergencyFailover, TargetSite: "pdx", Generation: 2, StartedAt: metav1.NewTime(f.clock.Now())}
	if err := env.Client.Status().Update(f.ctx, g); err != nil {
		t.Fatal(err)
	}
	f.driver.Kill(f.group, "iad")
	f.rec.Driver = &faultyDriver{Driver: f.driver, promote: func(context.Context, *bloodravenv1alpha1.MysqlFailoverGroup, string, int64, bool) error {
		return &topology.UnreachableError{Site: "iad", Err: errors.New("simulated: iad did not answer")}
	}}
	for i := 1; i <= 2; i++ {
		_, _ = f.reconcileTolerant()
		g = f.get()
		if tr := g.Status.Transition; tr == nil || tr.Failures != int32(i) || slices.Contains(f.driver.Calls, "fence pdx") {
			t.Fatalf("attempt %d: transition %+v, calls %v; want it kept and counted", i, tr, f.driver.Calls)
		}
		f.clock.Step(5 * time.Second)
	}
}
