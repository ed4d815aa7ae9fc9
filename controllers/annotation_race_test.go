package controllers

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/deployapi"
	"github.com/shipstream/bloodraven/internal/scene"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// Issue 35 ("also fix"): a grant reads the group before the revoke
// annotation appears, the bookkeeping lists the leases (the grant's is not
// written yet) and revokes what it found, the grant's write lands, the
// annotation is removed, and the grant's confirming read (after the
// removal) passes. At e3e472e that grant survived the revocation it raced.
// The bookkeeping lists again after the removal and revokes it.
func TestAGrantThatLandsBetweenTheRevocationAndTheAnnotationsRemovalIsRevoked(t *testing.T) {
	f := newFixture(t, true)
	f.settle()

	// The grant's Lease write waits until the bookkeeping is about to
	// remove the annotation (after its list).
	writeNow, written, removed := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var gateWrite atomic.Bool
	apiClient := intercepted(t, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, isLease := obj.(*coordinationv1.Lease); !isLease || !gateWrite.CompareAndSwap(true, false) {
				return c.Create(ctx, obj, opts...)
			}
			<-writeNow
			err := c.Create(ctx, obj, opts...)
			close(written)
			<-removed // the grant's confirming read comes after the removal
			return err
		},
	})
	store := &leasestore.Store{Client: apiClient, API: env.Client, Clock: f.clock, Key: testRecordKey}
	api, err := deployapi.New(deployapi.Config{IsLeader: func() bool { return true }, Clock: f.clock, Kube: env.Kube, FairShare: roomyShare,
		API: env.Client, Leases: store, Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	// The controller's patch that removes the annotation first lets the
	// grant's write land.
	var gatePatch atomic.Bool
	f.rec.Client = intercepted(t, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, isGroup := obj.(*bloodravenv1alpha1.MysqlFailoverGroup); isGroup && gatePatch.CompareAndSwap(true, false) {
				close(writeNow)
				<-written
				defer close(removed)
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})

	gateWrite.Store(true)
	type answer struct {
		status int
		body   map[string]any
	}
	done := make(chan answer, 1)
	go func() {
		r, err := scene.ForHandler(api.Handler(), f.token).Send(http.MethodPost, "/deploy/v1/groups/playground/leases",
			map[string]any{"kind": "migration", "operationId": "op-late", "instance": "counter-app", "ttlSeconds": 120})
		if err != nil {
			t.Error(err)
		}
		done <- answer{r.Status, r.Body}
	}()
	// The grant has read the group (no annotation) and waits at its write.
	waitUntil(t, func() bool { return !gateWrite.Load() })
	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
		metav1.SetMetaDataAnnotation(&g.ObjectMeta, bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation, "")
	})
	gatePatch.Store(true)
	f.reconcile()
	a := <-done
	if a.status != http.StatusCreated {
		t.Fatalf("setup: the racing grant answered %d %v; the race was not staged", a.status, a.body)
	}
	if _, ok := f.get().Annotations[bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation]; ok {
		t.Fatal("setup: the annotation was not removed")
	}
	_, rec, err := store.GetOwn(f.ctx, f.get(), leases.KindMigration, "op-late", true)
	if err != nil || rec == nil || rec.State != leases.StateRevoked || rec.Reason != leases.ReasonOperatorRevoked {
		t.Fatalf("the grant that raced the annotation: %+v (%v); want it revoked, operator_revoked", rec, err)
	}
	if r := f.renew("migration", "op-late", a.body["token"].(string)); r.status != http.StatusConflict || r.body["error"] != "revoked" {
		t.Fatalf("its renewal: %d %v, want 409 revoked", r.status, r.body)
	}
	// A grant decided after the removal stands.
	f.grant("migration", "op-next", 30)
	f.reconcile()
	if _, rec, _ := store.GetOwn(f.ctx, f.get(), leases.KindMigration, "op-next", true); rec == nil || rec.State != leases.StateActive {
		t.Fatalf("a grant after the removal: %+v", rec)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
