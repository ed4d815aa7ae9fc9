package controllers

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/deployapi"
	"github.com/shipstream/bloodraven/internal/scene"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/store/deployrun"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// Issue 35, item 5 (docs/leases.md "only authority live at the move is fenced by
// it"): a migration grant reads the group at generation 1, a planned
// failover completes (generation 2), the grant's Lease write lands, and the
// controller's bookkeeping runs before the grant reads the group again. At
// e3e472e the bookkeeping took the new record for authority live at the move
// and tombstoned its operation: the grant answered 423 and its retry 409
// revoked, so the client exited 8 for an operation that never held
// authority. The grant is withdrawn (423) and its retry granted at 2.
func TestAGrantThatLandsJustAfterAMoveIsWithdrawnAndItsRetryGranted(t *testing.T) {
	f := newFixture(t, true)
	f.settle()

	var armed atomic.Bool
	var wrote bool
	leaseClient := intercepted(t, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, isLease := obj.(*coordinationv1.Lease); !isLease || !armed.CompareAndSwap(true, false) {
				return c.Create(ctx, obj, opts...)
			}
			// The grant has read the group at generation 1 and decided:
			// the planned failover completes before its write lands.
			f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
				g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: "req-1", TargetSite: "pdx"}
			})
			for i := 0; i < 20 && f.get().Status.TopologyGeneration < 2; i++ {
				f.reconcile()
			}
			if g := f.get(); g.Status.TopologyGeneration != 2 || g.Status.ActiveSite != "pdx" {
				t.Fatalf("setup: the planned failover did not complete: generation %d active %s", g.Status.TopologyGeneration, g.Status.ActiveSite)
			}
			f.clock.Step(time.Second)
			err := c.Create(ctx, obj, opts...)
			wrote = err == nil
			// The bookkeeping sees the record before the grant reads the
			// group again.
			f.reconcile()
			return err
		},
	})
	store := &leasestore.Store{Client: leaseClient, API: env.Client, Clock: f.clock, Key: testRecordKey}
	api, err := deployapi.New(deployapi.Config{IsLeader: func() bool { return true }, Clock: f.clock, Kube: env.Kube, FairShare: roomyShare,
		API: env.Client, Leases: store, Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	body := map[string]any{"kind": "migration", "operationId": "op-late", "instance": "counter-app", "ttlSeconds": 30}
	armed.Store(true)
	r, err := scene.ForHandler(api.Handler(), f.token).Send(http.MethodPost, "/deploy/v1/groups/playground/leases", body)
	if err != nil {
		t.Fatal(err)
	}
	if armed.Load() || !wrote {
		t.Fatal("setup: the grant's Lease write was never intercepted")
	}
	if r.Status != http.StatusLocked || r.Body["error"] != "unstable" {
		t.Fatalf("the grant that landed after the move answered %d %v, want 423 unstable", r.Status, r.Body)
	}
	if tomb, err := store.Tombstone(f.ctx, f.get(), "op-late"); err != nil || tomb != nil {
		t.Fatalf("a tombstone for an operation that never held authority: %v (%v)", tomb != nil, err)
	}

	// The retry is granted at the new generation, and the bookkeeping
	// leaves it alone.
	retry := f.call(http.MethodPost, "/leases", body)
	if retry.status != http.StatusCreated || retry.body["topologyGeneration"] != float64(2) {
		t.Fatalf("the retry answered %d %v, want 201 at generation 2", retry.status, retry.body)
	}
	f.reconcile()
	if r := f.renew("migration", "op-late", retry.body["token"].(string)); r.status != http.StatusOK {
		t.Fatalf("renewal of the retried grant: %d %v", r.status, r.body)
	}
	// One run, for the tenure that was granted; none for the withdrawn one.
	runs, err := deployrun.List(f.ctx, env.Client, f.get())
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].Spec.GrantGeneration != 2 {
		t.Fatalf("DeployRuns %+v; want the retried grant's only", runs)
	}
	if evs := f.eventsOf("playground", "DeploymentLeaseRevoked", 0); len(evs) != 0 {
		t.Fatalf("%d DeploymentLeaseRevoked Events for a grant that never held authority", len(evs))
	}
	_, rec, err := store.GetOwn(f.ctx, f.get(), leases.KindMigration, "op-late", true)
	if err != nil || rec == nil || rec.State != leases.StateActive || rec.Generation != 2 {
		t.Fatalf("the mutex after the retry: %+v (%v)", rec, err)
	}
}
