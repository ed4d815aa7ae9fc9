package controllers

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// Issue 35, item 6: the group controller confirms it still leads before
// the driver opens a site (GroupReconciler.Leading, topology.ConfirmLeading).
// A replica that cannot confirm it (deposed, or cut off from its Lease)
// never promotes, however long the primary has been lost; once it can, it
// promotes at once. At e3e472e nothing asked.
func TestAReplicaThatCannotConfirmItLeadsPromotesNothing(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	var leading atomic.Bool
	f.rec.Leading = func(context.Context) (time.Duration, error) {
		if !leading.Load() {
			return 0, errors.New("the leader-election Lease is held by another replica")
		}
		return 10 * time.Second, nil
	}
	f.driver.Kill(f.group, "iad")
	for i := 0; i < 20; i++ {
		res, _ := f.reconcileTolerant()
		//lint:ignore SA1019 Requeue marks "probe again now" (see Reconcile)
		if res.RequeueAfter > 0 && !res.Requeue {
			f.clock.Step(min(res.RequeueAfter, 10*time.Second))
		}
		if f.driver.Writable(f.group, "pdx") {
			t.Fatalf("round %d: pdx opened by a replica that could not confirm it leads", i)
		}
	}
	if g := f.get(); g.Status.TopologyGeneration != 1 || g.Status.ActiveSite != "iad" {
		t.Fatalf("generation %d active %s: the deposed replica moved the group", g.Status.TopologyGeneration, g.Status.ActiveSite)
	}
	leading.Store(true)
	for i := 0; i < 10 && f.get().Status.TopologyGeneration != 2; i++ {
		res, _ := f.reconcileTolerant()
		//lint:ignore SA1019 Requeue marks "probe again now" (see Reconcile)
		if res.RequeueAfter > 0 && !res.Requeue {
			f.clock.Step(min(res.RequeueAfter, 10*time.Second))
		}
	}
	if g := f.get(); g.Status.TopologyGeneration != 2 || g.Status.ActiveSite != "pdx" || !f.driver.Writable(f.group, "pdx") {
		t.Fatalf("once leading: generation %d active %s", g.Status.TopologyGeneration, g.Status.ActiveSite)
	}
}
