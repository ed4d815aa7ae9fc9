package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// Modes of a cell.
const (
	modeFloor   = "floor"
	modeProduct = "product"
	modePeer    = "peer"
	// modeFloorMeta is the floor writing a deployment Lease as the product
	// does: only by BENCH_MODES, to measure what the Lease's metadata costs.
	modeFloorMeta = "floor-meta"
)

// op is one closed-loop operation of a worker.
type op func(ctx context.Context) error

// run is what a cell's workers did.
type run struct {
	// latencies of the successful operations started in the measured
	// window, sorted.
	latencies []time.Duration
	// total successful operations, warm-up included (the scrapes bracket
	// the whole cell).
	total  int
	errors int
	// firstErr is a sample of the failures.
	firstErr error
	elapsed  time.Duration
}

// runOps runs each op in its own closed loop for warmup+measure.
func runOps(ctx context.Context, ops []op, warmup, measure time.Duration) run {
	start := time.Now()
	warmEnd, end := start.Add(warmup), start.Add(warmup+measure)
	type result struct {
		lat           []time.Duration
		total, errors int
		err           error
	}
	results := make([]result, len(ops))
	var wg sync.WaitGroup
	for i, o := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[i]
			for {
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				err := o(ctx)
				d := time.Since(t0)
				if err != nil {
					r.errors++
					if r.err == nil {
						r.err = err
					}
					time.Sleep(10 * time.Millisecond) // no hot loop against a failing server
					continue
				}
				r.total++
				if !t0.Before(warmEnd) {
					r.lat = append(r.lat, d)
				}
			}
		}()
	}
	wg.Wait()
	out := run{elapsed: time.Since(start)}
	for _, r := range results {
		out.latencies = append(out.latencies, r.lat...)
		out.total += r.total
		out.errors += r.errors
		if out.firstErr == nil {
			out.firstErr = r.err
		}
	}
	sort.Slice(out.latencies, func(i, j int) bool { return out.latencies[i] < out.latencies[j] })
	return out
}

// quantile is the nearest-rank q-quantile of sorted, in milliseconds.
func quantile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	k = max(0, min(k, len(sorted)-1))
	return float64(sorted[k].Microseconds()) / 1000
}

// floorWorker does what a renewal cannot avoid, with a plain client: read
// the database and the group, write a Lease with the last resourceVersion.
type floorWorker struct {
	c               client.Client
	ns, db, group   string
	lease           *coordinationv1.Lease
	needsFreshLease bool
}

// floorReads are the two reads of a floor operation: the database (the
// authorization) and the group (the fence), into g.
func floorReads(ctx context.Context, c client.Client, ns, db, group string, g *bloodravenv1alpha1.MysqlFailoverGroup) error {
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: db}, &bloodravenv1alpha1.MysqlDatabase{}); err != nil {
		return err
	}
	return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: group}, g)
}

func (w *floorWorker) op(ctx context.Context) error {
	if err := floorReads(ctx, w.c, w.ns, w.db, w.group, &bloodravenv1alpha1.MysqlFailoverGroup{}); err != nil {
		return err
	}
	if w.needsFreshLease {
		if err := w.c.Get(ctx, client.ObjectKeyFromObject(w.lease), w.lease); err != nil {
			return err
		}
		w.needsFreshLease = false
	}
	w.lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if err := w.c.Update(ctx, w.lease); err != nil {
		w.needsFreshLease = true
		return err
	}
	return nil
}

// newFloorWorkers makes n workers, each with its own controller-runtime
// client and its own Lease (bench-floor-<i>, created here), and primes each
// client's REST mapping with one operation so that discovery requests fall
// outside every cell.
func (s *scene) newFloorWorkers(ctx context.Context, n int) ([]*floorWorker, error) {
	ws := make([]*floorWorker, n)
	for i := range ws {
		c, err := client.New(s.cfg, client.Options{Scheme: env.Scheme})
		if err != nil {
			return nil, err
		}
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-floor-%d", i), Namespace: s.o.Namespace},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(fmt.Sprintf("bench-floor-%d", i)),
				LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &metav1.MicroTime{Time: time.Now()}},
		}
		if err := c.Create(ctx, l); err != nil {
			return nil, fmt.Errorf("create lease %s: %w", l.Name, err)
		}
		ws[i] = &floorWorker{c: c, ns: s.o.Namespace, db: dbName(i), group: groupName(i), lease: l}
		if err := ws[i].op(ctx); err != nil {
			return nil, fmt.Errorf("prime floor worker %d: %w", i, err)
		}
	}
	return ws, nil
}

// floorMetaWorker is the floor worker whose Lease is a deployment lease as
// the product writes it: the record and its MAC in annotations, the four
// labels that the operator's cache selects on, the owner reference to the
// group, rewritten with a new renewedAt and expiresAt on every operation
// through leasestore.Store, as a renewal does. Its CPU per operation minus
// the floor's is what the deployment Lease's format costs (the API server's
// decode, field management and storage of a larger object, and the watch
// event that the operator's informer decodes); the product's minus this
// mode's is what the deployment API adds (HTTPS, authentication, the
// handler). A diagnostic mode (BENCH_MODES=floor,floor-meta,product), not
// in the report's default cells.
type floorMetaWorker struct {
	c             client.Client
	store         *leasestore.Store
	ns, db, group string
	obj           *leasestore.Object
	fresh         bool
}

func (w *floorMetaWorker) op(ctx context.Context) error {
	g := &bloodravenv1alpha1.MysqlFailoverGroup{}
	if err := floorReads(ctx, w.c, w.ns, w.db, w.group, g); err != nil {
		return err
	}
	if w.fresh {
		obj, err := w.store.Get(ctx, w.obj.Lease.Namespace, w.obj.Lease.Name, true)
		if err != nil {
			return err
		}
		if obj == nil {
			return fmt.Errorf("lease %s is gone", w.obj.Lease.Name)
		}
		w.obj, w.fresh = obj, false
	}
	rec := *w.obj.Record
	now := time.Now()
	rec.RenewedAt, rec.ExpiresAt = now, now.Add(time.Duration(rec.TTLSeconds)*time.Second)
	obj, err := w.store.Update(ctx, g, w.obj, rec)
	if err != nil {
		w.fresh = true
		return err
	}
	w.obj = obj
	return nil
}

// floorMetaWorkers creates n migration leases, one per group, as a grant
// would (sealed with the operator's record key, so that the operator reads
// them as live leases), and a worker renewing each.
func (s *scene) floorMetaWorkers(ctx context.Context, n int) ([]*floorMetaWorker, error) {
	c, err := client.New(s.cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		return nil, err
	}
	store := &leasestore.Store{Client: c, API: c, Clock: clock.RealClock{}, Key: s.o.RecordKey}
	ws := make([]*floorMetaWorker, n)
	for i := range ws {
		g := &bloodravenv1alpha1.MysqlFailoverGroup{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: s.o.Namespace, Name: groupName(i)}, g); err != nil {
			return nil, err
		}
		now := time.Now()
		op := fmt.Sprintf("bench-floor-meta-%d", i)
		rec := leases.Record{Group: g.Name, GroupUID: string(g.UID), Kind: leases.KindMigration, OperationID: op,
			Instance: dbName(i), Identity: "system:serviceaccount:" + s.o.Namespace + ":bench", State: leases.StateActive,
			Generation: g.Status.TopologyGeneration, TTLSeconds: 60, GrantedAt: now, RenewedAt: now, HeldSince: now,
			ExpiresAt: now.Add(time.Minute), TokenHash: strings.Repeat("0", 64)}
		// A product cell leaves its released lease under the same name.
		name := leases.LeaseName(leases.KindMigration, g.Name, op)
		old, err := store.Get(ctx, s.o.Namespace, name, true)
		if err != nil {
			return nil, err
		}
		obj, err := store.Put(ctx, g, name, old, rec)
		if err != nil {
			return nil, err
		}
		ws[i] = &floorMetaWorker{c: c, store: store, ns: s.o.Namespace, db: dbName(i), group: g.Name, obj: obj}
	}
	return ws, nil
}

// releaseFloorMeta deletes the workers' leases.
func releaseFloorMeta(ctx context.Context, ws []*floorMetaWorker) error {
	for _, w := range ws {
		if err := w.c.Delete(ctx, w.obj.Lease); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete %s: %w", w.obj.Lease.Name, err)
		}
	}
	return nil
}

// peerWorker is client-go leader election's renew fast path: the lock
// keeps the Lease it last wrote and Update PUTs it with a new renewTime.
type peerWorker struct {
	lock *resourcelock.LeaseLock
	rec  resourcelock.LeaderElectionRecord
	// stale: the last Update failed; leader election re-reads then.
	stale bool
}

func (w *peerWorker) op(ctx context.Context) error {
	if w.stale {
		if _, _, err := w.lock.Get(ctx); err != nil {
			return err
		}
		w.stale = false
	}
	w.rec.RenewTime = metav1.Now()
	if err := w.lock.Update(ctx, w.rec); err != nil {
		w.stale = true
		return err
	}
	return nil
}

// newPeerWorkers makes n LeaseLocks (bench-peer-<i>), each on its own
// clientset, and creates their Leases.
func (s *scene) newPeerWorkers(ctx context.Context, n int) ([]*peerWorker, error) {
	ws := make([]*peerWorker, n)
	for i := range ws {
		kube, err := kubernetes.NewForConfig(s.cfg)
		if err != nil {
			return nil, err
		}
		id := fmt.Sprintf("bench-peer-%d", i)
		lock := &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: id, Namespace: s.o.Namespace},
			Client:     kube.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		}
		now := metav1.Now()
		rec := resourcelock.LeaderElectionRecord{HolderIdentity: id, LeaseDurationSeconds: 15,
			AcquireTime: now, RenewTime: now}
		if err := lock.Create(ctx, rec); err != nil {
			return nil, fmt.Errorf("create lease %s: %w", id, err)
		}
		ws[i] = &peerWorker{lock: lock, rec: rec}
	}
	return ws, nil
}

// productWorker renews its group's migration lease over HTTPS.
type productWorker struct {
	d                   *deployClient
	bearer, group, opID string
	leaseToken          string
	body                []byte
}

func (w *productWorker) op(ctx context.Context) error {
	a, err := w.d.renew(ctx, w.bearer, w.group, w.opID, w.body)
	if err != nil {
		return err
	}
	if a.Status != http.StatusOK {
		return fmt.Errorf("renew %s/%s: %d %s", w.group, w.opID, a.Status, a.Error)
	}
	return nil
}

// productWorkers grants each of n groups' migration lease to a fresh
// operation (with the setup token) and gives worker i a fresh
// ServiceAccount token of its own: its TokenReview is not cached yet when
// the cell starts.
func (s *scene) productWorkers(ctx context.Context, n int, cell string) ([]*productWorker, error) {
	bearers := s.tokens(n)
	ws := make([]*productWorker, n)
	err := parallel(n, 16, func(_, i int) error {
		opID := fmt.Sprintf("bench-%s-w%d", cell, i)
		tok, err := s.deploy.grant(ctx, s.setupToken, groupName(i), opID, dbName(i))
		if err != nil {
			return err
		}
		ws[i] = &productWorker{d: s.deploy.from(i), bearer: bearers[i], group: groupName(i), opID: opID,
			leaseToken: tok, body: renewBody(tok)}
		return nil
	})
	return ws, err
}

// releaseProduct ends the cell's leases so that the next cell (and the
// revocation) can grant the groups' mutexes to other operations.
func (s *scene) releaseProduct(ctx context.Context, ws []*productWorker) error {
	return parallel(len(ws), 16, func(_, i int) error {
		w := ws[i]
		return s.deploy.release(ctx, s.setupToken, w.group, w.opID, w.leaseToken)
	})
}
