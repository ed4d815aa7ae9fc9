package leasestore

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
)

// A record is trusted only when the operator's key sealed it for this very
// Lease; a record with no MAC only when its Lease predates the key, and then
// only until the key's start plus the longest ttl. Anything else holds
// nothing and is reported once per object version.
func TestOnlyRecordsSealedForTheirLeaseAreTrusted(t *testing.T) {
	keyStart := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	key, err := NewRecordKey([]byte(strings.Repeat("k", 32)), keyStart)
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _ := NewRecordKey([]byte(strings.Repeat("x", 32)), keyStart)
	group := &bloodravenv1alpha1.MysqlFailoverGroup{ObjectMeta: metav1.ObjectMeta{Name: "playground", Namespace: "playground", UID: "uid-1"}}
	forever := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)
	record := func() *leases.Record {
		return &leases.Record{Group: "playground", GroupUID: "uid-1", Kind: leases.KindMigration, OperationID: "op-1",
			State: leases.StateActive, TTLSeconds: 30, ExpiresAt: forever, TokenHash: leases.HashToken("t")}
	}
	lease := func(name string, created time.Time, seal *RecordKey) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "playground",
			CreationTimestamp: metav1.NewTime(created), ResourceVersion: "7"}}
		if err := Encode(l, record(), group); err != nil {
			t.Fatal(err)
		}
		if seal != nil {
			seal.seal(l)
		}
		return l
	}
	after := keyStart.Add(time.Hour)
	tests := map[string]struct {
		lease      *coordinationv1.Lease
		trusted    bool
		wantExpiry time.Time
		why        string
	}{
		"sealed by the key":             {lease: lease("bloodraven-migration-playground", after, key), trusted: true, wantExpiry: forever},
		"sealed by another key":         {lease: lease("bloodraven-migration-playground", after, otherKey), why: macMismatch},
		"no MAC, created after the key": {lease: lease("bloodraven-migration-playground", after, nil), why: macMissing},
		"no MAC, created before the key: clamped to the key's start plus the longest ttl": {
			lease: lease("bloodraven-migration-playground", keyStart.Add(-time.Hour), nil), trusted: true, wantExpiry: keyStart.Add(120 * time.Second)},
		"a sealed record copied to another Lease": {lease: func() *coordinationv1.Lease {
			l := lease("bloodraven-migration-playground", after, key)
			l.Name = "bloodraven-migration-other"
			return l
		}(), why: macMismatch},
		"a sealed record edited by hand": {lease: func() *coordinationv1.Lease {
			l := lease("bloodraven-migration-playground", after, key)
			l.Annotations[RecordAnnotation] = strings.Replace(l.Annotations[RecordAnnotation], `"op-1"`, `"op-2"`, 1)
			return l
		}(), why: macMismatch},
		"a MAC that is not one": {lease: func() *coordinationv1.Lease {
			l := lease("bloodraven-migration-playground", after, nil)
			l.Annotations[RecordMACAnnotation] = base64.StdEncoding.EncodeToString([]byte("short"))
			return l
		}(), why: macMalformed},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var reports []string
			s := &Store{Key: key, OnUnverified: func(ns, n, why string) { reports = append(reports, why) }}
			for range 3 { // reported once per object version, however often read
				rec, err := s.decode(tc.lease)
				if err != nil {
					t.Fatal(err)
				}
				if !tc.trusted {
					if rec.Group != "" || rec.OperationID != "" || rec.State != leases.StateExpired || rec.BelongsTo("uid-1") || rec.Kind != leases.KindMigration {
						t.Fatalf("an unverified record stands for %+v; want one that holds nothing", rec)
					}
					if s.Verified(tc.lease) != nil {
						t.Fatal("Verified returned an unverified record")
					}
					continue
				}
				if rec.OperationID != "op-1" || !rec.ExpiresAt.Equal(tc.wantExpiry) {
					t.Fatalf("record %+v, want op-1 expiring %v", rec, tc.wantExpiry)
				}
			}
			if tc.trusted && len(reports) != 0 {
				t.Fatalf("a trusted record was reported: %v", reports)
			}
			if !tc.trusted && (len(reports) != 1 || reports[0] != tc.why) {
				t.Fatalf("reports %q, want one %q", reports, tc.why)
			}
		})
	}
}

// The store seals what it writes, and without a key it writes no MAC and
// trusts what it reads (tools and tests that predate the key).
func TestTheStoreSealsWhatItWrites(t *testing.T) {
	key, _ := NewRecordKey([]byte(strings.Repeat("k", 32)), time.Now())
	group := &bloodravenv1alpha1.MysqlFailoverGroup{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: "ns", UID: "u"}}
	rec := &leases.Record{Group: "g", GroupUID: "u", Kind: leases.KindMigration, OperationID: "op", State: leases.StateActive}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "bloodraven-migration-g", Namespace: "ns"}}
	if err := (&Store{Key: key}).encode(l, rec, group); err != nil {
		t.Fatal(err)
	}
	if key.check(l) != macValid {
		t.Fatalf("the store's own write does not verify: %s", key.check(l))
	}
	plain := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "bloodraven-migration-g", Namespace: "ns"}}
	if err := (&Store{}).encode(plain, rec, group); err != nil {
		t.Fatal(err)
	}
	if _, ok := plain.Annotations[RecordMACAnnotation]; ok {
		t.Fatal("a store without a key wrote a MAC")
	}
	if got := (&Store{}).Verified(plain); got == nil || got.OperationID != "op" {
		t.Fatalf("a store without a key distrusts records: %+v", got)
	}
}

func TestAKeyIsAtLeast32Bytes(t *testing.T) {
	if _, err := NewRecordKey(make([]byte, 31), time.Now()); err == nil {
		t.Fatal("a 31-byte key was accepted")
	}
}

// The store decodes one object version once: a second read of the same UID
// and resourceVersion gets the same record, each caller its own copy; a new
// version, or an object not read from the API server, is decoded afresh.
func TestOneObjectVersionIsDecodedOnceAndEachReaderGetsItsOwnRecord(t *testing.T) {
	key, err := NewRecordKey([]byte(strings.Repeat("k", 32)), time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	group := &bloodravenv1alpha1.MysqlFailoverGroup{ObjectMeta: metav1.ObjectMeta{Name: "playground", Namespace: "playground", UID: "uid-1"}}
	s := &Store{Key: key}
	rec := &leases.Record{Group: "playground", GroupUID: "uid-1", Kind: leases.KindTombstone, OperationID: "op-1",
		State: leases.StateRevoked, RevokedTokenHashes: []string{"a", "b"}}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "bloodraven-tombstone-playground-op-1", Namespace: "playground",
		UID: "lease-1", ResourceVersion: "10", CreationTimestamp: metav1.NewTime(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))}}
	if err := s.encode(l, rec, group); err != nil {
		t.Fatal(err)
	}
	first, err := s.decode(l)
	if err != nil || first.OperationID != "op-1" {
		t.Fatalf("decode: %+v, %v", first, err)
	}
	first.OperationID, first.RevokedTokenHashes[0] = "changed", "changed"

	// The same version with another annotation: the API server never
	// serves that, so the remembered record is what comes back.
	same := l.DeepCopy()
	same.Annotations[RecordAnnotation] = "{not json"
	second, err := s.decode(same)
	if err != nil || second.OperationID != "op-1" || second.RevokedTokenHashes[0] != "a" {
		t.Fatalf("the same version again: %+v, %v; want the first record, untouched by its reader", second, err)
	}
	for name, changed := range map[string]func(*coordinationv1.Lease){
		"a new resourceVersion": func(l *coordinationv1.Lease) { l.ResourceVersion = "11" },
		"no UID":                func(l *coordinationv1.Lease) { l.UID = "" },
	} {
		other := same.DeepCopy()
		changed(other)
		if _, err := s.decode(other); err == nil {
			t.Errorf("%s: the broken record was not decoded afresh", name)
		}
	}
}
