package leasestore

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/lru"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shipstream/bloodraven/leases"
)

// RecordMACAnnotation carries the record's MAC: base64 of HMAC-SHA256, under
// the operator's record key, of the Lease's namespace, name and record
// annotation (see RecordKey).
const RecordMACAnnotation = "bloodraven.shipstream.io/record-mac"

// RecordKeySecretKey is the data key of the record key in its Secret.
const RecordKeySecretKey = "key"

// macDomain separates this MAC from any other use of the key.
const macDomain = "bloodraven.shipstream.io/lease-record/v1"

// RecordKey authenticates deployment lease records (docs/leases.md, "Lease
// objects are the operator's alone"). Every record the operator writes
// carries a MAC over the Lease's namespace, name and record, so a record
// copied to another Lease, or written by anyone without the key, does not
// verify.
//
// Since is when the key came to be (its Secret's creationTimestamp, set by
// the API server). A record without any MAC was written before the upgrade
// that introduced the key, or by a forger: it is honoured only when its
// Lease was created no later than Since (a server-set time nobody can
// forge), and then its expiry is clamped to Since plus the longest ttl, so
// a hand-rewritten old Lease holds nothing for long. Its next renewal
// writes it with a MAC.
type RecordKey struct {
	key   []byte
	Since time.Time
}

// NewRecordKey is a key of at least 32 bytes.
func NewRecordKey(key []byte, since time.Time) (*RecordKey, error) {
	if len(key) < 32 {
		return nil, fmt.Errorf("record key: %d bytes, want at least 32", len(key))
	}
	return &RecordKey{key: append([]byte(nil), key...), Since: since}, nil
}

func (k *RecordKey) mac(namespace, name, record string) []byte {
	h := hmac.New(sha256.New, k.key)
	for _, part := range []string{macDomain, namespace, name, record} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return h.Sum(nil)
}

// seal sets l's MAC annotation for its record annotation.
func (k *RecordKey) seal(l *coordinationv1.Lease) {
	sum := k.mac(l.Namespace, l.Name, l.Annotations[RecordAnnotation])
	l.Annotations[RecordMACAnnotation] = base64.StdEncoding.EncodeToString(sum)
}

// Verdicts of a record's MAC.
const (
	macValid     = ""
	macLegacy    = "legacy"             // no MAC, Lease created before the key
	macMissing   = "no MAC"             // no MAC, Lease created after the key
	macMalformed = "malformed MAC"      // not base64 of a SHA-256 sum
	macMismatch  = "MAC does not match" // written without the key, or copied
)

// check judges l's MAC.
func (k *RecordKey) check(l *coordinationv1.Lease) string {
	enc, ok := l.Annotations[RecordMACAnnotation]
	if !ok {
		if !l.CreationTimestamp.IsZero() && !l.CreationTimestamp.Time.After(k.Since) {
			return macLegacy
		}
		return macMissing
	}
	got, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(got) != sha256.Size {
		return macMalformed
	}
	if !hmac.Equal(got, k.mac(l.Namespace, l.Name, l.Annotations[RecordAnnotation])) {
		return macMismatch
	}
	return macValid
}

// legacyExpiry is the latest expiry a legacy record (no MAC, written before
// the key) keeps.
func (k *RecordKey) legacyExpiry() time.Time {
	return k.Since.Add(time.Duration(leases.MaxTTLSeconds) * time.Second)
}

// Unverified is told of a Lease whose record did not verify: once per
// version of the object, with why.
type Unverified func(namespace, name, why string)

// unverifiedSeen deduplicates reports by object version.
type unverifiedSeen struct {
	mu   sync.Mutex
	seen *lru.Cache
}

func (u *unverifiedSeen) first(l *coordinationv1.Lease) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.seen == nil {
		u.seen = lru.New(1024)
	}
	k := l.Namespace + "/" + l.Name + "@" + l.ResourceVersion
	if _, ok := u.seen.Get(k); ok {
		return false
	}
	u.seen.Add(k, struct{}{})
	return true
}

// decodedRecords remembers the record decoded (and judged) for each of the
// last object versions read, keyed by UID and resourceVersion: the API
// server gives a new resourceVersion to every change, so one version always
// has one record. Each caller gets its own copy. (The LRU locks itself; two
// readers that miss one version at once both decode it, harmlessly.)
type decodedRecords struct {
	once sync.Once
	recs *lru.Cache
}

func (d *decodedRecords) cache() *lru.Cache {
	d.once.Do(func() { d.recs = lru.New(decodedVersions) })
	return d.recs
}

// decodedVersions is how many object versions are remembered: more than
// the live leases of a busy operator, so a steady renewal finds its Lease.
const decodedVersions = 4096

type objectVersion struct {
	uid             types.UID
	resourceVersion string
}

func versionKey(l *coordinationv1.Lease) (objectVersion, bool) {
	if l.UID == "" || l.ResourceVersion == "" {
		return objectVersion{}, false // not read from the API server
	}
	return objectVersion{l.UID, l.ResourceVersion}, true
}

func (d *decodedRecords) get(l *coordinationv1.Lease) (*leases.Record, bool) {
	k, ok := versionKey(l)
	if !ok {
		return nil, false
	}
	v, ok := d.cache().Get(k)
	if !ok {
		return nil, false
	}
	return v.(*leases.Record).Clone(), true
}

func (d *decodedRecords) add(l *coordinationv1.Lease, rec *leases.Record) {
	k, ok := versionKey(l)
	if !ok {
		return
	}
	d.cache().Add(k, rec.Clone())
}

// unverifiedRecord is what an unverified Lease stands for: an object that
// exists (so a grant overwrites it, carrying its resourceVersion) but holds
// nothing, defers nothing and belongs to no group and no operation, so it
// is never renewed, re-granted or revived, and never listed.
func unverifiedRecord(l *coordinationv1.Lease) *leases.Record {
	kind := leases.Kind(l.Labels[LabelKind])
	switch {
	case strings.HasPrefix(l.Name, "bloodraven-migration-"):
		kind = leases.KindMigration
	case strings.HasPrefix(l.Name, "bloodraven-hold-"):
		kind = leases.KindFailoverHold
	case strings.HasPrefix(l.Name, "bloodraven-tombstone-"):
		kind = leases.KindTombstone
	}
	return &leases.Record{Kind: kind, State: leases.StateExpired}
}

// ErrRecordKeyLost: the record key Secret is gone while deployment lease
// records sealed with it remain. A new key would make every one of them
// hold nothing (a live lease would be lost, a tombstone would stop
// answering 409 revoked), so the operator refuses to start.
var ErrRecordKeyLost = errors.New("the lease record key Secret is gone while deployment lease records sealed with it remain")

// LoadRecordKey reads the record key from the Secret namespace/name, and
// creates the Secret with a new random key when it does not exist (the
// first start of an operator with record MACs). Two replicas starting at
// once agree: the loser of the create reads the winner's key.
//
// A missing Secret is created only when no deployment Lease in scope (the
// namespaces the operator watches; none: every namespace) carries a record
// MAC: otherwise it fails with ErrRecordKeyLost and says how to recover,
// rather than silently orphaning every lease and tombstone.
func LoadRecordKey(ctx context.Context, c client.Client, namespace, name string, scope ...string) (*RecordKey, error) {
	for attempt := 0; attempt < 3; attempt++ {
		sec := &corev1.Secret{}
		err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, sec)
		if err == nil {
			return NewRecordKey(sec.Data[RecordKeySecretKey], sec.CreationTimestamp.Time)
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("read record key Secret %s/%s: %w", namespace, name, err)
		}
		if n, err := sealedRecords(ctx, c, scope); err != nil {
			return nil, fmt.Errorf("record key Secret %s/%s is missing; checking for sealed lease records: %w", namespace, name, err)
		} else if n > 0 {
			return nil, fmt.Errorf("%w (%d Leases labelled %s=true carry %s): restore the Secret %s/%s from a backup; "+
				"or, giving up every deployment lease and tombstone, delete those Leases and restart the operator",
				ErrRecordKeyLost, n, LabelDeployLease, RecordMACAnnotation, namespace, name)
		}
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("record key: %w", err)
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
				Labels: map[string]string{LabelManagedBy: ManagedByValue}},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{RecordKeySecretKey: key},
		}
		err = c.Create(ctx, sec)
		if err == nil {
			return NewRecordKey(key, sec.CreationTimestamp.Time)
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create record key Secret %s/%s: %w", namespace, name, err)
		}
	}
	return nil, errors.New("record key Secret: created and deleted concurrently; giving up")
}

// sealedRecords counts the deployment Leases in scope (every namespace when
// empty) that carry a record MAC.
func sealedRecords(ctx context.Context, c client.Client, scope []string) (int, error) {
	namespaces := scope
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	n := 0
	for _, ns := range namespaces {
		var list coordinationv1.LeaseList
		if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{LabelDeployLease: "true"}); err != nil {
			return 0, err
		}
		for _, l := range list.Items {
			if _, ok := l.Annotations[RecordMACAnnotation]; ok {
				n++
			}
		}
	}
	return n, nil
}
