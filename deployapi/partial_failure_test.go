package deployapi

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
)

// move bumps the group's generation as the controller's promotion does,
// recording when the topology moved.
func (f *fixture) move(to int64) time.Time {
	f.t.Helper()
	at := f.clock.Now()
	f.setStatus(func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) {
		s.TopologyGeneration = to
		mt := metav1.NewMicroTime(at)
		s.TopologyGenerationTime = &mt
	})
	return at
}

// Defect 2 (issue 19): an operation whose authority was live when the
// topology moved is revoked however its lease ends afterwards. At b60db83 a
// release between the move and the controller's bookkeeping answered 204,
// wrote "released", and the same operation was granted again at the new
// generation (201): it resumed across the move. A lease that lapsed in that
// window was taken again the same way.
func TestALeaseThatEndsAfterTheMoveIsRevoked(t *testing.T) {
	for name, tc := range map[string]struct {
		end func(f *fixture, m response) // how the lease ends after the move
	}{
		"released after the move": {end: func(f *fixture, m response) {
			r := f.do(http.MethodDelete, leasePath("migration", "m2-x"), f.token, nil, "X-Lease-Token", m.str("token"))
			if r.status != http.StatusNoContent {
				f.t.Fatalf("release after the move: %d %s, want 204", r.status, r.raw)
			}
		}},
		"expired after the move": {end: func(f *fixture, _ response) { f.clock.Step(10 * time.Second) }},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			m := f.grantTTL("migration", "m2-x", 5, http.StatusCreated)
			f.clock.Step(time.Second)
			f.move(2)
			tc.end(f, m)
			_, rec, err := f.store.GetOwn(f.ctx, f.group, leases.KindMigration, "m2-x", true)
			if err != nil {
				t.Fatal(err)
			}
			r := f.do(http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", "m2-x", 30))
			expectError(t, r, http.StatusConflict, "revoked")
			if r.str("reason") != leases.ReasonTopologyChanged || r.num("topologyGeneration") != 2 {
				t.Fatalf("re-grant across the move: %s (record before it: %s)", r.raw, stateOf(rec))
			}
			tomb, err := f.store.Tombstone(f.ctx, f.group, "m2-x")
			if err != nil || tomb == nil || tomb.Generation != 2 || !tomb.AnnouncePending {
				t.Fatalf("tombstone %s (%v); want one at generation 2, pending announcement", tombOf(tomb), err)
			}
			// Another operation takes the mutex at the new generation.
			if o := f.grant("migration", "other", http.StatusCreated); o.num("topologyGeneration") != 2 {
				t.Fatalf("another operation after the revocation: %s", o.raw)
			}
		})
	}
}

// A lease released, or expired, before the move is not revoked by it: the
// same operation may be granted again at the new generation.
func TestALeaseThatEndedBeforeTheMoveIsNotRevoked(t *testing.T) {
	f := newFixture(t)
	m := f.grantTTL("migration", "early", 5, http.StatusCreated)
	if r := f.do(http.MethodDelete, leasePath("migration", "early"), f.token, nil, "X-Lease-Token", m.str("token")); r.status != http.StatusNoContent {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}
	f.clock.Step(time.Second)
	f.move(2)
	if r := f.grant("migration", "early", http.StatusCreated); r.num("topologyGeneration") != 2 {
		t.Fatalf("re-grant after a release before the move: %s", r.raw)
	}
	if tomb, err := f.store.Tombstone(f.ctx, f.group, "early"); err != nil || tomb != nil {
		t.Fatalf("tombstone %s (%v); want none", tombOf(tomb), err)
	}
}

// staleReader answers the request's first read of the group with the group
// as it was before the move: a request that read the group, then stalled
// while the topology moved and another operation took the mutex.
type staleReader struct {
	client.Reader
	stale *bloodravenv1alpha1.MysqlFailoverGroup
	armed *atomic.Bool
}

func (r staleReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if g, isGroup := obj.(*bloodravenv1alpha1.MysqlFailoverGroup); isGroup && r.armed.CompareAndSwap(true, false) {
		r.stale.DeepCopyInto(g)
		return nil
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// Defect 3 (issue 19): a stale view of the group never revokes a lease at
// the current generation. At b60db83 a POST that read generation 1 and
// stalled found B's mutex, granted at 2 after the move, "of another
// generation" and revoked it; B's next renewal answered 409.
func TestAStaleViewNeverRevokesALeaseAtTheCurrentGeneration(t *testing.T) {
	f := newFixture(t)
	stale := f.group.DeepCopy() // generation 1
	f.move(2)
	b := f.grantTTL("migration", "b", 120, http.StatusCreated)
	if b.num("topologyGeneration") != 2 {
		t.Fatalf("setup: b granted at %v", b.num("topologyGeneration"))
	}
	var armed atomic.Bool
	srv := f.newServer()
	srv.api = staleReader{Reader: env.Client, stale: stale, armed: &armed}
	armed.Store(true)
	r := f.doWith(srv, http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", "a", 30))
	if armed.Load() {
		t.Fatal("the stale group was never read")
	}
	expectError(t, r, http.StatusConflict, "held")
	if tomb, err := f.store.Tombstone(f.ctx, f.group, "b"); err != nil || tomb != nil {
		t.Fatalf("b's tombstone %s (%v): a stale view revoked a lease at the current generation", tombOf(tomb), err)
	}
	if rr := f.do(http.MethodPut, leasePath("migration", "b"), f.token, map[string]any{"token": b.str("token")}); rr.status != http.StatusOK {
		t.Fatalf("b's renewal after the stale request: %d %s", rr.status, rr.raw)
	}
}

// Defect 7 (issue 19): while the revoke annotation stands, grants answer
// 423, so no grant lands between the controller's list of the leases it
// revokes and the annotation's removal. At b60db83 the grant was 201.
func TestGrantsWaitWhileTheRevokeAnnotationStands(t *testing.T) {
	f := newFixture(t)
	g := &bloodravenv1alpha1.MysqlFailoverGroup{}
	if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(f.group), g); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(g.DeepCopy())
	g.Annotations = map[string]string{bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation: "true"}
	if err := env.Client.Patch(f.ctx, g, patch); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"migration"} {
		r := f.do(http.MethodPost, groupPath+"/leases", f.token, grantBody(kind, "op-1", 30))
		expectError(t, r, http.StatusLocked, "unstable")
	}
	if objs := f.leaseObjects(); len(objs) != 0 {
		t.Fatalf("a refused grant left %d Lease objects", len(objs))
	}
}

// A re-grant withdrawn because the revoke annotation (or a transition)
// appeared between its read and its write puts back the record it replaced:
// the operation still holds what it held, so the controller's revocation
// finds it. Deleting it (review finding) erased a live operation: the
// revocation found nothing, and the next POST was a create (201).
func TestAWithdrawnRegrantPutsBackTheLeaseItReplaced(t *testing.T) {
	f := newFixture(t)
	first := f.grantTTL("migration", "op-a", 120, http.StatusCreated)
	var armed atomic.Bool
	reader := movingReader{Reader: env.Client, armed: &armed, move: func() {
		g := &bloodravenv1alpha1.MysqlFailoverGroup{}
		if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(f.group), g); err != nil {
			t.Error(err)
			return
		}
		patch := client.MergeFrom(g.DeepCopy())
		g.Annotations = map[string]string{bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation: "true"}
		if err := env.Client.Patch(f.ctx, g, patch); err != nil {
			t.Error(err)
		}
	}}
	srv := f.newServer()
	srv.api = reader
	armed.Store(true)
	r := f.doWith(srv, http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", "op-a", 120))
	expectError(t, r, http.StatusLocked, "unstable")
	_, rec, err := f.store.GetOwn(f.ctx, f.group, leases.KindMigration, "op-a", true)
	if err != nil || rec == nil || rec.State != leases.StateActive || !leases.TokenMatches(first.str("token"), rec.TokenHash) {
		t.Fatalf("after the withdrawn re-grant the mutex is %v (%v); want the first grant's record back", stateOf(rec), err)
	}
	rev, err := f.store.Revoke(f.ctx, f.group, "op-a", leases.ReasonOperatorRevoked)
	if err != nil || rev.Tombstone == nil {
		t.Fatalf("the annotation's revocation found nothing to revoke: %v", err)
	}
}

func stateOf(r *leases.Record) string {
	if r == nil {
		return "absent"
	}
	return string(r.State)
}

// tombOf describes a tombstone for a failure message without its token
// hashes.
func tombOf(t *leases.Record) string {
	if t == nil {
		return "absent"
	}
	return fmt.Sprintf("%s at generation %d (pending announcement %v)", t.Reason, t.Generation, t.AnnouncePending)
}

// Issue 35 ("also fix"): a take-over withdrawn because the topology moved
// between its read of the group and its write puts back the record it
// replaced. At e3e472e it deleted it: op-a, whose mutex lapsed after the
// move (so the move fences it), lost its record before anything revoked it,
// and its retry was granted at the new generation across the move.
func TestAWithdrawnTakeOverPutsBackTheLeaseItReplaced(t *testing.T) {
	f := newFixture(t)
	f.grantTTL("migration", "op-a", 5, http.StatusCreated)
	stale := f.group.DeepCopy() // generation 1
	f.clock.Step(time.Second)
	f.move(2)                      // op-a is live at the move
	f.clock.Step(10 * time.Second) // and lapses after it
	var armed atomic.Bool
	srv := f.newServer()
	srv.api = staleReader{Reader: env.Client, stale: stale, armed: &armed}
	armed.Store(true)
	r := f.doWith(srv, http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", "op-b", 30))
	if armed.Load() {
		t.Fatal("the stale group was never read")
	}
	expectError(t, r, http.StatusLocked, "unstable")
	_, rec, err := f.store.GetOwn(f.ctx, f.group, leases.KindMigration, "op-a", true)
	if err != nil || rec == nil || rec.Generation != 1 {
		t.Fatalf("after the withdrawn take-over op-a's record is %s (%v); want it back", stateOf(rec), err)
	}
	retry := f.do(http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", "op-a", 30))
	expectError(t, retry, http.StatusConflict, "revoked")
	if retry.str("reason") != leases.ReasonTopologyChanged {
		t.Fatalf("op-a's retry across the move: %s", retry.raw)
	}
}
