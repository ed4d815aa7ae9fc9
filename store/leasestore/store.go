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

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/store"
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
	// Key authenticates records: every record written carries its MAC, and
	// a record read that does not verify holds nothing (see RecordKey). Nil
	// writes no MAC and trusts every record (tools and older tests only).
	Key *RecordKey
	// OnUnverified, when set, is told once per object version of a record
	// that did not verify (the operator logs and counts it).
	OnUnverified Unverified
	// decoded holds the records of the object versions read last.
	decoded decodedRecords

	unverified unverifiedSeen
}

// decode reads l's record and judges its MAC (see RecordKey): a record that
// does not verify stands for an object that holds nothing. An object
// version (UID and resourceVersion) read before is not decoded again: a
// renewal reads its Lease from the cache twice (to settle the namespace, then
// to decide), and the controller's predicates and bookkeeping read the same
// versions.
func (s *Store) decode(l *coordinationv1.Lease) (*leases.Record, error) {
	if rec, ok := s.decoded.get(l); ok {
		return rec, nil
	}
	rec, err := s.decodeAndCheck(l)
	if err == nil {
		s.decoded.add(l, rec)
	}
	return rec, err
}

func (s *Store) decodeAndCheck(l *coordinationv1.Lease) (*leases.Record, error) {
	rec, err := Decode(l)
	if err != nil || s.Key == nil {
		return rec, err
	}
	switch why := s.Key.check(l); why {
	case macValid:
		return rec, nil
	case macLegacy:
		if rec.State == leases.StateActive {
			if end := s.Key.legacyExpiry(); rec.ExpiresAt.After(end) {
				rec.ExpiresAt = end
			}
		}
		return rec, nil
	default:
		if s.OnUnverified != nil && s.unverified.first(l) {
			s.OnUnverified(l.Namespace, l.Name, why)
		}
		return unverifiedRecord(l), nil
	}
}

// Verified reads l's record as the store does: nil when it cannot be read
// or does not verify.
func (s *Store) Verified(l *coordinationv1.Lease) *leases.Record {
	rec, err := s.decode(l)
	if err != nil || rec.Group == "" {
		return nil
	}
	return rec
}

// encode writes rec into l (Encode) and seals it with the key.
func (s *Store) encode(l *coordinationv1.Lease, rec *leases.Record, group *bloodravenv1alpha1.MysqlFailoverGroup) error {
	if err := Encode(l, rec, group); err != nil {
		return err
	}
	if s.Key != nil {
		s.Key.seal(l)
	}
	return nil
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
	rec, err := s.decode(l)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return &Object{Lease: l, Record: rec}, nil
}

// GetOwn reads the Lease of kind for group's operation and returns it with
// the record when it is that operation's, of this incarnation of the group
// (nil record otherwise: another operation holds the mutex, or the Lease is
// left over from a deleted group of the same name).
func (s *Store) GetOwn(ctx context.Context, group *bloodravenv1alpha1.MysqlFailoverGroup, kind leases.Kind, operationID string, fresh bool) (*Object, *leases.Record, error) {
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
func (s *Store) Tombstone(ctx context.Context, group *bloodravenv1alpha1.MysqlFailoverGroup, operationID string) (*leases.Record, error) {
	_, rec, err := s.GetOwn(ctx, group, leases.KindTombstone, operationID, true)
	return rec, err
}

// Create stores rec as a new Lease named name, owned by group. It returns the
// API server's AlreadyExists error when another writer created it first.
func (s *Store) Create(ctx context.Context, group *bloodravenv1alpha1.MysqlFailoverGroup, name string, rec leases.Record) (*Object, error) {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: group.Namespace}}
	if err := s.encode(l, &rec, group); err != nil {
		return nil, err
	}
	if err := s.Client.Create(ctx, l); err != nil {
		return nil, fmt.Errorf("create lease %s/%s: %w", group.Namespace, name, err)
	}
	return &Object{Lease: l, Record: &rec}, nil
}

// Update replaces obj's record with rec, owned by group. The write carries
// obj's resourceVersion: it fails with the API server's Conflict error when
// the Lease changed since obj was read. It also resets the Lease's managed
// fields (see resetManagedFields).
func (s *Store) Update(ctx context.Context, group *bloodravenv1alpha1.MysqlFailoverGroup, obj *Object, rec leases.Record) (*Object, error) {
	l := obj.Lease.DeepCopy()
	l.ManagedFields = resetManagedFields()
	if err := s.encode(l, &rec, group); err != nil {
		return nil, err
	}
	if err := s.Client.Update(ctx, l); err != nil {
		return nil, fmt.Errorf("update lease %s/%s: %w", l.Namespace, l.Name, err)
	}
	return &Object{Lease: l, Record: &rec}, nil
}

// resetManagedFields is the managedFields of every Lease update: one empty
// entry, which asks the API server to drop the object's managed fields. An
// object that no one applied and whose managed fields are empty is then
// never tracked again (the API server skips field management for it), so a
// renewal costs no structured-merge-diff walk of the Lease, and the stored
// object, its watch events and the operator's cache shrink by about a
// third. Deployment Leases are written only by the operator (the lease
// guard policy) and never server-side applied: the entries would record
// nothing anyone can use. (The API server still records them at creation.)
func resetManagedFields() []metav1.ManagedFieldsEntry {
	return []metav1.ManagedFieldsEntry{{}}
}

// Put writes rec for the Lease name: a Create when obj is nil, otherwise an
// Update with obj's resourceVersion.
func (s *Store) Put(ctx context.Context, group *bloodravenv1alpha1.MysqlFailoverGroup, name string, obj *Object, rec leases.Record) (*Object, error) {
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
func (s *Store) Transition(ctx context.Context, group *bloodravenv1alpha1.MysqlFailoverGroup, kind leases.Kind, operationID string,
	step func(cur *leases.Record) (leases.Record, bool)) (*leases.Record, error) {
	var written *leases.Record
	err := store.Retry(func(bool) error {
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

// Revocation is what Revoke wrote.
type Revocation struct {
	// Group is the group as Revoke read it, fresh.
	Group *bloodravenv1alpha1.MysqlFailoverGroup
	// Tombstone is the operation's tombstone (written now or found); nil when
	// nothing qualified.
	Tombstone *Object
	// Records are the operation's records Revoke rewrote as revoked.
	Records []leases.Record
}

// Revoke ends operationID's leases in group for reason. It decides nothing
// itself: it reads the group (its generation and last move) and the
// operation's records from the API server, asks leases.Revoke what to write,
// and writes it: first the tombstone (so the revocation survives a crash
// right after), then each record with the resourceVersion it was read at. A
// conflict reads everything again and asks again. So a revocation only ever
// tombstones a lease whose generation is older than a freshly read one,
// whatever view of the group the caller had; nothing is written when nothing
// qualifies. The group passed in names the group; its status is not used.
func (s *Store) Revoke(ctx context.Context, group *bloodravenv1alpha1.MysqlFailoverGroup, operationID, reason string) (Revocation, error) {
	var out Revocation
	err := store.Retry(func(bool) error {
		out = Revocation{}
		fresh := &bloodravenv1alpha1.MysqlFailoverGroup{}
		if err := s.API.Get(ctx, client.ObjectKeyFromObject(group), fresh); err != nil {
			if apierrors.IsNotFound(err) {
				return nil // the group is gone, and its leases with it
			}
			return fmt.Errorf("read group %s/%s for revocation: %w", group.Namespace, group.Name, err)
		}
		out.Group = fresh
		if fresh.UID != group.UID {
			return nil // another incarnation: none of the old records counts for it
		}
		var objs []*Object
		var recs []*leases.Record
		for _, kind := range []leases.Kind{leases.KindMigration, leases.KindFailoverHold} {
			obj, rec, err := s.GetOwn(ctx, fresh, kind, operationID, true)
			if err != nil {
				return err
			}
			if rec != nil {
				objs, recs = append(objs, obj), append(recs, rec)
			}
		}
		rev, ok := leases.Revoke(leases.RevocationInput{Group: fresh.Name, GroupUID: string(fresh.UID), OperationID: operationID,
			Reason: reason, Move: MoveOf(fresh), Records: recs, Now: s.Clock.Now()})
		if !ok {
			return nil
		}
		tomb, err := s.putTombstone(ctx, fresh, rev.Tombstone)
		if err != nil {
			return err
		}
		out.Tombstone = tomb
		for _, next := range rev.Next {
			obj := objs[indexOf(recs, next.Kind)]
			if _, err := s.Update(ctx, fresh, obj, next); err != nil {
				return fmt.Errorf("revoke %s lease of %s: %w", next.Kind, operationID, err)
			}
			out.Records = append(out.Records, next)
		}
		return nil
	})
	return out, err
}

func indexOf(recs []*leases.Record, kind leases.Kind) int {
	for i, r := range recs {
		if r.Kind == kind {
			return i
		}
	}
	return -1
}

// MoveOf is the group's last move, as the fence records it.
func MoveOf(g *bloodravenv1alpha1.MysqlFailoverGroup) leases.Move {
	m := leases.Move{Generation: g.Status.TopologyGeneration}
	if t := g.Status.TopologyGenerationTime; t != nil {
		m.At = t.Time
	}
	return m
}

// Announce clears the tombstone's AnnouncePending with the resourceVersion
// it was read at. It reports false when another writer changed it first (it
// was announced by someone else, or the group was re-created): the caller
// then announces nothing.
func (s *Store) Announce(ctx context.Context, group *bloodravenv1alpha1.MysqlFailoverGroup, tomb *Object) (bool, error) {
	if !tomb.Record.AnnouncePending {
		return false, nil
	}
	if _, err := s.Update(ctx, group, tomb, tomb.Record.Announced()); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// PendingTombstones lists the group's tombstones whose revocation has not
// been announced, from the cache (a lagging cache costs a conflict in
// Announce, never a second announcement).
func (s *Store) PendingTombstones(ctx context.Context, namespace, group string) ([]*Object, error) {
	var list coordinationv1.LeaseList
	if err := s.reader(false).List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels{
		LabelDeployLease: "true", LabelGroup: leases.LabelValue(group), LabelKind: KindPendingTombstone}); err != nil {
		return nil, fmt.Errorf("list pending tombstones of %s/%s: %w", namespace, group, err)
	}
	var out []*Object
	for i := range list.Items {
		rec, err := s.decode(&list.Items[i])
		if err != nil || rec.Group != group || rec.Kind != leases.KindTombstone || !rec.AnnouncePending {
			continue
		}
		out = append(out, &Object{Lease: &list.Items[i], Record: rec})
	}
	return out, nil
}

// putTombstone creates the tombstone, replacing one left over from a deleted
// group of the same name, and returns it; an existing tombstone of this
// group stands (the operation is already revoked) and is returned as read.
func (s *Store) putTombstone(ctx context.Context, group *bloodravenv1alpha1.MysqlFailoverGroup, tomb leases.Record) (*Object, error) {
	name := leases.TombstoneName(group.Name, tomb.OperationID)
	var out *Object
	err := store.Retry(func(fresh bool) error {
		var err error
		if !fresh {
			out, err = s.Create(ctx, group, name, tomb)
			return err
		}
		obj, err := s.Get(ctx, group.Namespace, name, true)
		if err != nil {
			return err
		}
		if obj == nil {
			out, err = s.Create(ctx, group, name, tomb)
			return err
		}
		if obj.Record.BelongsTo(string(group.UID)) {
			out = obj // already revoked
			return nil
		}
		out, err = s.Update(ctx, group, obj, tomb)
		return err
	})
	return out, err
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
	groupReq, _ := labels.NewRequirement(LabelGroup, selection.Equals, []string{leases.LabelValue(group)})
	sel = sel.Add(*groupReq)
	var list coordinationv1.LeaseList
	if err := s.reader(fresh).List(ctx, &list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("list leases of %s/%s: %w", namespace, group, err)
	}
	out := make([]*Object, 0, len(list.Items))
	for i := range list.Items {
		rec, err := s.decode(&list.Items[i])
		if err != nil || rec.Group != group || rec.Kind == leases.KindTombstone {
			continue // not ours to report; pending tombstones are read by PendingTombstones
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
		LabelDeployLease: "true", LabelGroup: leases.LabelValue(group)}); err != nil {
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
