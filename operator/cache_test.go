package operator

import (
	"context"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shipstream/bloodraven/internal/scene"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// Tombstones are never cached. The cache the operator's manager runs
// (CacheOptions) holds a group's mutex and a tombstone pending
// announcement (its creation must wake the controller), drops that
// tombstone once it is announced, and never takes in one written
// announced. The API server still has all of them: they are only not
// held in memory, so the heap does not grow with revocation history.
func TestTombstonesAreNeverCached(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := env.Namespace(t)
	g := scene.Group(ns, "history")
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	revoked := func(op string) []leases.Record {
		return []leases.Record{{Group: g.Name, GroupUID: string(g.UID), Kind: leases.KindMigration, OperationID: op,
			Instance: "app", Identity: "system:serviceaccount:" + ns + ":deploy", State: leases.StateActive}}
	}
	mutex := leases.Record{Group: g.Name, GroupUID: string(g.UID), Kind: leases.KindMigration, OperationID: "op-1",
		Instance: "app", Identity: "system:serviceaccount:" + ns + ":deploy", State: leases.StateActive,
		Generation: 1, TTLSeconds: 30, GrantedAt: now, RenewedAt: now, ExpiresAt: now.Add(30 * time.Second)}
	pending := leases.NewTombstone(g.Name, string(g.UID), "op-0", leases.ReasonOperatorRevoked, 1, revoked("op-0"), now)
	announced := leases.NewTombstone(g.Name, string(g.UID), "op-2", leases.ReasonOperatorRevoked, 1, revoked("op-2"), now).Announced()
	write := func(name string, rec leases.Record) *coordinationv1.Lease {
		t.Helper()
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		if err := leasestore.Encode(l, &rec, g); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	mutexName, pendingName := leases.MigrationName(g.Name), leases.TombstoneName(g.Name, "op-0")
	write(mutexName, mutex)
	pendingLease := write(pendingName, pending)

	c := startCache(ctx, t, ns)
	cached := func() []string {
		var list coordinationv1.LeaseList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, l := range list.Items {
			names = append(names, l.Name)
		}
		slices.Sort(names)
		return names
	}
	waitCached := func(what string, want ...string) {
		t.Helper()
		slices.Sort(want)
		deadline := time.Now().Add(30 * time.Second)
		for got := cached(); !slices.Equal(got, want); got = cached() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the cache holds %v, want %v", what, got, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitCached("a pending tombstone is watched", mutexName, pendingName)

	// The controller announces it: relabelled, it leaves the cache.
	rec := pending.Announced()
	if err := leasestore.Encode(pendingLease, &rec, g); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Update(ctx, pendingLease); err != nil {
		t.Fatal(err)
	}
	waitCached("an announced tombstone", mutexName)

	// One written announced never enters it.
	write(leases.TombstoneName(g.Name, "op-2"), announced)
	time.Sleep(2 * time.Second) // a watch event would have arrived by now
	waitCached("a tombstone written announced", mutexName)

	var all coordinationv1.LeaseList
	if err := env.Client.List(ctx, &all, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(all.Items) != 3 {
		t.Errorf("the API server holds %d Leases, want the mutex and both tombstones", len(all.Items))
	}
}

// startCache starts the operator's cache (CacheOptions) for ns until ctx
// ends, and waits for it to sync.
func startCache(ctx context.Context, t *testing.T, ns string) cache.Cache {
	t.Helper()
	opts := CacheOptions(ns)
	opts.Scheme = env.Scheme
	c, err := cache.New(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not sync")
	}
	return c
}
