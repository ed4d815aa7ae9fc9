package leasestore

import (
	"context"
	"errors"
	"fmt"
	"sort"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
)

// CacheSelector selects the Lease objects worth caching: live deployment
// leases (migration mutexes and holds), never tombstones, which are read
// uncached on the rare paths that need them, and never the leader-election
// Lease.
func CacheSelector() labels.Selector {
	deploy, _ := labels.NewRequirement(LabelDeployLease, selection.Equals, []string{"true"})
	notTomb, _ := labels.NewRequirement(LabelKind, selection.NotEquals, []string{string(leases.KindTombstone)})
	return labels.NewSelector().Add(*deploy, *notTomb)
}

// CacheByObject is the manager cache configuration for deployment leases.
func CacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&coordinationv1.Lease{}: {Label: CacheSelector()},
	}
}

// Store reads and writes deployment leases. It is the only code that talks
// to the API server about them; what a record becomes is decided by the
// transitions of package leases.
type Store struct {
	// Client writes.
	Client client.Client
	// Cached reads leases from an informer cache (may lag; every write made
	// from it carries its resourceVersion, so lag costs a conflict, never
	// correctness). Nil means read from the API server.
	Cached client.Reader
	// API reads from the API server, uncached.
	API   client.Reader
	Clock clock.PassiveClock
}

// Object is a stored Lease and its decoded record.
type Object struct {
	Lease  *coordinationv1.Lease
	Record *leases.Record
}

// RecordOf is o's record, nil for a nil object.
func RecordOf(o *Object) *leases.Record {
	if o == nil {
		return nil
	}
	return o.Record
}

// Records are the objects' records, and the object each came from (to write
// back with the resourceVersion a decision was made on).
func Records(objs []*Object) ([]*leases.Record, map[*leases.Record]*Object) {
	recs := make([]*leases.Record, len(objs))
	objOf := make(map[*leases.Record]*Object, len(objs))
	for i, o := range objs {
		recs[i], objOf[o.Record] = o.Record, o
	}
	return recs, objOf
}

// ErrCorrupt marks a Lease whose record cannot be decoded.
var ErrCorrupt = errors.New("corrupt deployment lease record")

func (s *Store) reader(fresh bool) client.Reader {
	if fresh || s.Cached == nil {
		return s.API
	}
	return s.Cached
}

// Get reads a deployment Lease; (nil, nil) when absent. fresh reads from the
// API server instead of the cache.
func (s *Store) Get(ctx context.Context, namespace, name string, fresh bool) (*Object, error) {
	l := &coordinationv1.Lease{}
	if err := s.reader(fresh).Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, l); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get lease %s/%s: %w", namespace, name, err)
	}
	rec, err := Decode(l)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return &Object{Lease: l, Record: rec}, nil
}

// GetOwn reads the Lease of kind for group's operation and returns it with
// the record when it is that operation's, of this incarnation of the group
// (nil record otherwise: another operation holds the mutex, or the Lease is
// left over from a deleted group of the same name).
func (s *Store) GetOwn(ctx context.Context, group *v1.MysqlFailoverGroup, kind leases.Kind, operationID string, fresh bool) (*Object, *leases.Record, error) {
	o, err := s.Get(ctx, group.Namespace, leases.LeaseName(kind, group.Name, operationID), fresh)
	if err != nil || o == nil {
		return o, nil, err
	}
	if o.Record.OperationID != operationID || !o.Record.BelongsTo(string(group.UID)) {
		return o, nil, nil
	}
	return o, o.Record, nil
}

// Tombstone reads the operation's tombstone from the API server; nil when
// this incarnation of the group never revoked the operation.
func (s *Store) Tombstone(ctx context.Context, group *v1.MysqlFailoverGroup, operationID string) (*leases.Record, error) {
	_, rec, err := s.GetOwn(ctx, group, leases.KindTombstone, operationID, true)
	return rec, err
}

// Create stores rec as a new Lease named name, owned by group. It returns the
// API server's AlreadyExists error when another writer created it first.
func (s *Store) Create(ctx context.Context, group *v1.MysqlFailoverGroup, name string, rec leases.Record) (*Object, error) {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: group.Namespace}}
	if err := Encode(l, &rec, group); err != nil {
		return nil, err
	}
	if err := s.Client.Create(ctx, l); err != nil {
		return nil, fmt.Errorf("create lease %s/%s: %w", group.Namespace, name, err)
	}
	return &Object{Lease: l, Record: &rec}, nil
}

// Update replaces obj's record with rec, owned by group. The write carries
// obj's resourceVersion: it fails with the API server's Conflict error when
// the Lease changed since obj was read.
func (s *Store) Update(ctx context.Context, group *v1.MysqlFailoverGroup, obj *Object, rec leases.Record) (*Object, error) {
	l := obj.Lease.DeepCopy()
	if err := Encode(l, &rec, group); err != nil {
		return nil, err
	}
	if err := s.Client.Update(ctx, l); err != nil {
		return nil, fmt.Errorf("update lease %s/%s: %w", l.Namespace, l.Name, err)
	}
	return &Object{Lease: l, Record: &rec}, nil
}

// Put writes rec for the Lease name: a Create when obj is nil, otherwise an
// Update with obj's resourceVersion.
func (s *Store) Put(ctx context.Context, group *v1.MysqlFailoverGroup, name string, obj *Object, rec leases.Record) (*Object, error) {
	if obj == nil {
		return s.Create(ctx, group, name, rec)
	}
	return s.Update(ctx, group, obj, rec)
}

// Transition reads the Lease of kind for group's operation fresh and, while
// step says so, replaces its record with step's result, retrying on
// conflict from a fresh read. step sees the current record (nil when it is
// not this operation's) and returns the next record and true, or false to
// leave the Lease alone. It returns the record written, or nil.
func (s *Store) Transition(ctx context.Context, group *v1.MysqlFailoverGroup, kind leases.Kind, operationID string,
	step func(cur *leases.Record) (leases.Record, bool)) (*leases.Record, error) {
	var written *leases.Record
	err := Optimistic(func(bool) error {
		obj, cur, err := s.GetOwn(ctx, group, kind, operationID, true)
		if err != nil || cur == nil {
			return err
		}
		next, ok := step(cur)
		if !ok {
			return nil
		}
		if _, err := s.Update(ctx, group, obj, next); err != nil {
			return err
		}
		written = &next
		return nil
	})
	return written, err
}

// Revoke ends operationID's leases in group for reason: first the
// tombstone (so the revocation survives a crash right after), then the
// migration mutex if the operation holds it, then its failover-hold. Every
// record is re-read from the API server and re-checked before it is touched:
// a topology_changed revocation ends only records granted under a generation
// other than the group's current one, so a cache that lags a re-grant never
// revokes a valid lease. Nothing is written, no tombstone either, unless a
// live record qualifies. It returns the records it revoked.
func (s *Store) Revoke(ctx context.Context, group *v1.MysqlFailoverGroup, operationID, reason string) ([]leases.Record, error) {
	now := s.Clock.Now()
	uid, gen := string(group.UID), group.Status.TopologyGeneration
	qualifies := func(r *leases.Record) bool {
		return r.Live(now) && r.BelongsTo(uid) && (reason != leases.ReasonTopologyChanged || r.Generation != gen)
	}
	var live []leases.Record
	for _, kind := range []leases.Kind{leases.KindMigration, leases.KindFailoverHold} {
		_, rec, err := s.GetOwn(ctx, group, kind, operationID, true)
		if err != nil {
			return nil, err
		}
		if rec != nil && qualifies(rec) {
			live = append(live, *rec)
		}
	}
	if len(live) == 0 {
		return nil, nil
	}
	tomb := leases.NewTombstone(group.Name, uid, operationID, reason, gen, live, now)
	if err := s.putTombstone(ctx, group, tomb); err != nil {
		return nil, err
	}
	var revoked []leases.Record
	for _, kind := range []leases.Kind{leases.KindMigration, leases.KindFailoverHold} {
		rec, err := s.Transition(ctx, group, kind, operationID, func(cur *leases.Record) (leases.Record, bool) {
			// The tombstone stands: end every non-terminal record of the
			// operation, so nothing of it renews.
			if cur.State == leases.StateRevoked || cur.State == leases.StateReleased || !cur.BelongsTo(uid) {
				return leases.Record{}, false
			}
			return cur.Revoked(reason, now), true
		})
		if err != nil {
			return revoked, fmt.Errorf("revoke %s lease of %s: %w", kind, operationID, err)
		}
		if rec != nil {
			revoked = append(revoked, *rec)
		}
	}
	return revoked, nil
}

// putTombstone creates the tombstone, replacing one left over from a deleted
// group of the same name.
func (s *Store) putTombstone(ctx context.Context, group *v1.MysqlFailoverGroup, tomb leases.Record) error {
	name := leases.TombstoneName(group.Name, tomb.OperationID)
	return Optimistic(func(fresh bool) error {
		if !fresh {
			_, err := s.Create(ctx, group, name, tomb)
			return err
		}
		obj, err := s.Get(ctx, group.Namespace, name, true)
		if err != nil {
			return err
		}
		if obj == nil {
			_, err = s.Create(ctx, group, name, tomb)
			return err
		}
		if obj.Record.BelongsTo(string(group.UID)) {
			return nil // already revoked
		}
		_, err = s.Update(ctx, group, obj, tomb)
		return err
	})
}

// Delete deletes obj if it is unchanged since it was read.
func (s *Store) Delete(ctx context.Context, obj *Object) error {
	err := s.Client.Delete(ctx, obj.Lease, client.Preconditions{ResourceVersion: &obj.Lease.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete lease %s/%s: %w", obj.Lease.Namespace, obj.Lease.Name, err)
	}
	return nil
}

// List returns the group's deployment lease records (not tombstones),
// sorted by kind then operation; fresh reads from the API server instead of
// the cache. Records of a deleted group of the same name are included:
// callers judge them with Record.BelongsTo.
func (s *Store) List(ctx context.Context, namespace, group string, fresh bool) ([]*leases.Record, error) {
	objs, err := s.ListObjects(ctx, namespace, group, fresh)
	if err != nil {
		return nil, err
	}
	recs, _ := Records(objs)
	return recs, nil
}

// ListObjects returns the group's deployment Leases (not tombstones), sorted
// by kind then operation; fresh reads from the API server.
func (s *Store) ListObjects(ctx context.Context, namespace, group string, fresh bool) ([]*Object, error) {
	sel := CacheSelector()
	groupReq, _ := labels.NewRequirement(LabelGroup, selection.Equals, []string{leases.GroupLabelValue(group)})
	sel = sel.Add(*groupReq)
	var list coordinationv1.LeaseList
	if err := s.reader(fresh).List(ctx, &list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("list leases of %s/%s: %w", namespace, group, err)
	}
	out := make([]*Object, 0, len(list.Items))
	for i := range list.Items {
		rec, err := Decode(&list.Items[i])
		if err != nil || rec.Group != group {
			continue // not ours to report
		}
		out = append(out, &Object{Lease: &list.Items[i], Record: rec})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Record, out[j].Record
		if a.Kind != b.Kind {
			return a.Kind == leases.KindMigration
		}
		return a.OperationID < b.OperationID
	})
	return out, nil
}

// ListAll lists the group's deployment Leases and tombstones from the API
// server (for the finalizer).
func (s *Store) ListAll(ctx context.Context, namespace, group string) ([]*Object, error) {
	var list coordinationv1.LeaseList
	if err := s.API.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels{
		LabelDeployLease: "true", LabelGroup: leases.GroupLabelValue(group)}); err != nil {
		return nil, fmt.Errorf("list leases of %s/%s: %w", namespace, group, err)
	}
	var out []*Object
	for i := range list.Items {
		rec, err := Decode(&list.Items[i])
		if err == nil && rec.Group != group {
			continue
		}
		out = append(out, &Object{Lease: &list.Items[i], Record: rec})
	}
	return out, nil
}
