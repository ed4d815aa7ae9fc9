package leases

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// CacheSelector selects the Lease objects worth caching: live deployment
// leases (migration mutexes and holds), never tombstones, which are read
// uncached on the rare paths that need them, and never the leader-election
// Lease.
func CacheSelector() labels.Selector {
	deploy, _ := labels.NewRequirement(LabelDeployLease, selection.Equals, []string{"true"})
	notTomb, _ := labels.NewRequirement(LabelKind, selection.NotEquals, []string{KindTombstone})
	return labels.NewSelector().Add(*deploy, *notTomb)
}

// CacheByObject is the manager cache configuration for deployment leases.
func CacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&coordinationv1.Lease{}: {Label: CacheSelector()},
	}
}

// Store reads and writes deployment leases.
type Store struct {
	// Client writes, and reads through Cached when it is a cached client.
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
	Record *Record
}

// ErrCorrupt marks a Lease whose record cannot be decoded.
var ErrCorrupt = errors.New("corrupt deployment lease record")

// Get reads a deployment Lease; (nil, nil) when absent. fresh reads from the
// API server instead of the cache.
func (s *Store) Get(ctx context.Context, namespace, name string, fresh bool) (*Object, error) {
	r := s.Cached
	if fresh || r == nil {
		r = s.API
	}
	l := &coordinationv1.Lease{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, l); err != nil {
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

// Tombstone reads the operation's tombstone from the API server; nil when
// the operation was never revoked.
func (s *Store) Tombstone(ctx context.Context, namespace, group, operationID string) (*Record, error) {
	o, err := s.Get(ctx, namespace, TombstoneName(group, operationID), true)
	if err != nil || o == nil {
		return nil, err
	}
	return o.Record, nil
}

// Create stores rec as a new Lease named name, owned by group. It returns the
// API server's AlreadyExists error when another writer created it first.
func (s *Store) Create(ctx context.Context, group *v1.MysqlFailoverGroup, name string, rec *Record) (*Object, error) {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: group.Namespace}}
	if err := Encode(l, rec, group, labelKindOf(rec)); err != nil {
		return nil, err
	}
	if err := s.Client.Create(ctx, l); err != nil {
		return nil, fmt.Errorf("create lease %s/%s: %w", group.Namespace, name, err)
	}
	return &Object{Lease: l, Record: rec}, nil
}

// Update replaces obj's record with rec. The write carries obj's
// resourceVersion: it fails with the API server's Conflict error when the
// Lease changed since obj was read.
func (s *Store) Update(ctx context.Context, obj *Object, rec *Record) (*Object, error) {
	l := obj.Lease.DeepCopy()
	if err := Encode(l, rec, nil, labelKindOf(rec)); err != nil {
		return nil, err
	}
	if err := s.Client.Update(ctx, l); err != nil {
		return nil, fmt.Errorf("update lease %s/%s: %w", l.Namespace, l.Name, err)
	}
	return &Object{Lease: l, Record: rec}, nil
}

func labelKindOf(rec *Record) string { return string(rec.Kind) }

// Revoke ends every lease of operationID in group with reason: first the
// tombstone (so the revocation survives a crash right after), then the
// migration mutex if the operation holds it, then its failover-hold. It is
// idempotent. It returns the records it revoked (empty when none was live).
func (s *Store) Revoke(ctx context.Context, group *v1.MysqlFailoverGroup, operationID, reason string) ([]*Record, error) {
	ns := group.Namespace
	now := s.Clock.Now()
	mig, err := s.Get(ctx, ns, MigrationName(group.Name), true)
	if err != nil {
		return nil, err
	}
	hold, err := s.Get(ctx, ns, HoldName(group.Name, operationID), true)
	if err != nil {
		return nil, err
	}
	var targets []*Object
	if mig != nil && mig.Record.OperationID == operationID {
		targets = append(targets, mig)
	}
	if hold != nil {
		targets = append(targets, hold)
	}

	tomb := &Record{
		Group: group.Name, Kind: Kind(KindTombstone), OperationID: operationID, State: StateRevoked, Reason: reason,
		Generation: group.Status.TopologyGeneration, GrantedAt: now, RenewedAt: now, ExpiresAt: now, RevokedAt: now,
	}
	for _, t := range targets {
		tomb.Instance, tomb.Identity = t.Record.Instance, t.Record.Identity
		if t.Record.TokenHash != "" {
			tomb.RevokedTokenHashes = append(tomb.RevokedTokenHashes, t.Record.TokenHash)
		}
	}
	if _, err := s.Create(ctx, group, TombstoneName(group.Name, operationID), tomb); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}

	var revoked []*Record
	for _, t := range targets {
		rec, err := s.markRevoked(ctx, t, operationID, reason, now)
		if err != nil {
			return revoked, err
		}
		if rec != nil {
			revoked = append(revoked, rec)
		}
	}
	return revoked, nil
}

// markRevoked sets a lease of operationID to revoked, re-reading on
// conflict. It returns the revoked record, or nil when the lease was no longer
// the operation's or was already terminal.
func (s *Store) markRevoked(ctx context.Context, obj *Object, operationID, reason string, now time.Time) (*Record, error) {
	for attempt := 0; attempt < 10; attempt++ {
		r := obj.Record
		if r.OperationID != operationID || r.State == StateRevoked || r.State == StateReleased {
			return nil, nil
		}
		next := *r
		wasLive := r.Live(now)
		next.State, next.Reason, next.RevokedAt = StateRevoked, reason, now
		if _, err := s.Update(ctx, obj, &next); err == nil {
			if !wasLive {
				return nil, nil
			}
			return &next, nil
		} else if !apierrors.IsConflict(err) {
			return nil, err
		}
		fresh, err := s.Get(ctx, obj.Lease.Namespace, obj.Lease.Name, true)
		if err != nil || fresh == nil {
			return nil, err
		}
		obj = fresh
	}
	return nil, fmt.Errorf("revoke lease %s/%s: still conflicting after 10 attempts", obj.Lease.Namespace, obj.Lease.Name)
}

// List returns the group's deployment lease records (not tombstones),
// sorted by kind then operation; fresh reads from the API server instead of
// the cache.
func (s *Store) List(ctx context.Context, namespace, group string, fresh bool) ([]*Record, error) {
	objs, err := s.ListObjects(ctx, namespace, group, fresh)
	if err != nil {
		return nil, err
	}
	out := make([]*Record, len(objs))
	for i, o := range objs {
		out[i] = o.Record
	}
	return out, nil
}

// ListObjects returns the group's deployment Leases (not tombstones), sorted
// by kind then operation; fresh reads from the API server.
func (s *Store) ListObjects(ctx context.Context, namespace, group string, fresh bool) ([]*Object, error) {
	r := s.Cached
	if fresh || r == nil {
		r = s.API
	}
	var list coordinationv1.LeaseList
	sel := CacheSelector()
	groupReq, _ := labels.NewRequirement(LabelGroup, selection.Equals, []string{GroupLabelValue(group)})
	sel = sel.Add(*groupReq)
	if err := r.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
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
			return a.Kind == KindMigration
		}
		return a.OperationID < b.OperationID
	})
	return out, nil
}
