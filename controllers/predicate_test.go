package controllers

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/leasestore"
)

func TestLeaseWatchPassesOnlyDecisionChanges(t *testing.T) {
	base := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	lease := func(mutate func(*leases.Record)) *coordinationv1.Lease {
		return encodeLease(t, base, leases.KindFailoverHold, mutate)
	}
	mutex := func(mutate func(*leases.Record)) *coordinationv1.Lease {
		return encodeLease(t, base, leases.KindMigration, mutate)
	}
	same := func(*leases.Record) {}
	tests := map[string]struct {
		kind   func(func(*leases.Record)) *coordinationv1.Lease
		newRec func(*leases.Record)
		want   bool
	}{
		"a hold renewal moves expiresAt (the retry time)": {kind: lease, newRec: func(r *leases.Record) { r.ExpiresAt = base.Add(10 * time.Second) }, want: true},
		"a mutex renewal moves only expiresAt":            {kind: mutex, newRec: func(r *leases.Record) { r.ExpiresAt = base.Add(10 * time.Second) }, want: false},
		"a mutex release changes the state":               {kind: mutex, newRec: func(r *leases.Record) { r.State = leases.StateReleased }, want: true},
		"a mutex taken over by another operation":         {kind: mutex, newRec: func(r *leases.Record) { r.OperationID = "op-2" }, want: true},
		"release changes the state":                       {kind: lease, newRec: func(r *leases.Record) { r.State = leases.StateReleased }, want: true},
		"revocation changes the state":                    {kind: lease, newRec: func(r *leases.Record) { r.State = leases.StateRevoked }, want: true},
		"nothing the controller decides on":               {kind: lease, newRec: func(r *leases.Record) { r.RenewedAt = base.Add(time.Second) }, want: false},
		"an identical update":                             {kind: lease, newRec: same, want: false},
	}
	p := leaseDecisionChanged()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := p.Update(event.UpdateEvent{ObjectOld: tc.kind(same), ObjectNew: tc.kind(tc.newRec)})
			if got != tc.want {
				t.Fatalf("passes = %v, want %v", got, tc.want)
			}
		})
	}
	if !p.Create(event.CreateEvent{Object: lease(same)}) || !p.Delete(event.DeleteEvent{Object: lease(same)}) {
		t.Fatal("creations and deletions must pass")
	}
	// A pending tombstone is created (the controller must announce it) and
	// leaves the cache once announced (nothing to decide).
	pending := encodeLease(t, base, leases.KindTombstone, func(r *leases.Record) { r.State, r.AnnouncePending = leases.StateRevoked, true })
	if !p.Create(event.CreateEvent{Object: pending}) || p.Delete(event.DeleteEvent{Object: pending}) {
		t.Fatal("a pending tombstone's creation must pass and its announcement (leaving the cache) must not")
	}
}

func encodeLease(t *testing.T, base time.Time, kind leases.Kind, mutate func(*leases.Record)) *coordinationv1.Lease {
	t.Helper()
	rec := &leases.Record{Group: "g", Kind: kind, OperationID: "op", State: leases.StateActive,
		Generation: 1, TTLSeconds: 30, ExpiresAt: base, GrantedAt: base, RenewedAt: base}
	mutate(rec)
	l := &coordinationv1.Lease{}
	if err := leasestore.Encode(l, rec, nil); err != nil {
		t.Fatal(err)
	}
	return l
}
