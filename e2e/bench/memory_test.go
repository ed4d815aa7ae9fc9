package bench

import (
	"context"
	"fmt"
	"runtime"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/operatortest"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// heapAlloc is the live heap after a full collection.
func heapAlloc() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// measureTombstoneHeap creates n tombstones of operatortest's group (as the
// operator writes them: leasestore.Encode of a revoked tombstone record,
// owned by the group), lets the operator run for settle, and reports how
// much the process's live heap grew. The heap before is read after the
// process was left alone for settle too.
//
// Whatever the bench holds must stay reachable until the second reading:
// a client dropped in between (each controller-runtime client has its own
// REST mapper, a few hundred KiB) would count as memory the tombstones
// freed. The caller keeps its workers alive; the client that creates the
// tombstones is made, and its REST mapping loaded, before the first reading.
func (s *scene) measureTombstoneHeap(ctx context.Context, n, workers int, settle time.Duration) (Memory, error) {
	c, err := client.New(s.cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		return Memory{}, err
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: s.o.Namespace, Name: "bench-floor-0"}, &coordinationv1.Lease{}); err != nil {
		return Memory{}, fmt.Errorf("prime the tombstone client: %w", err)
	}
	g := &bloodravenv1alpha1.MysqlFailoverGroup{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.o.Namespace, Name: operatortest.GroupName}, g); err != nil {
		return Memory{}, err
	}
	identity := fmt.Sprintf("system:serviceaccount:%s:%s", s.o.ClientNamespace, operatortest.ServiceAccount)
	now := time.Now()
	time.Sleep(settle)
	before := heapAlloc()
	err = parallel(n, workers, func(_, i int) error {
		opID := fmt.Sprintf("bench-tombstone-%d", i)
		tok, err := leases.NewToken()
		if err != nil {
			return err
		}
		revoked := leases.Record{Group: g.Name, GroupUID: string(g.UID), Kind: leases.KindMigration, OperationID: opID,
			Instance: operatortest.Instance, Identity: identity, State: leases.StateActive, TokenHash: leases.HashToken(tok)}
		// As tombstones stand once announced: a pending one is cached (and
		// watched) only until the controller announces it, which it does in
		// the reconcile its creation wakes; the steady state is what grows.
		rec := leases.NewTombstone(g.Name, string(g.UID), opID, leases.ReasonOperatorRevoked,
			g.Status.TopologyGeneration, []leases.Record{revoked}, now).Announced()
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leases.TombstoneName(g.Name, opID), Namespace: g.Namespace}}
		if err := leasestore.Encode(l, &rec, g); err != nil {
			return err
		}
		if err := c.Create(ctx, l); err != nil {
			return fmt.Errorf("create tombstone %d: %w", i, err)
		}
		return nil
	})
	if err != nil {
		return Memory{}, err
	}
	time.Sleep(settle)
	after := heapAlloc()
	runtime.KeepAlive(c)
	delta := (float64(after) - float64(before)) / (1 << 20)
	return Memory{
		Scope:      "whole test process heap (bench + in-process operator), HeapAlloc after GC",
		Tombstones: n, SettleSeconds: settle.Seconds(), HeapBeforeBytes: before, HeapAfterBytes: after,
		DeltaMiB: delta, MiBPer10000: delta * 10000 / float64(n),
	}, nil
}
