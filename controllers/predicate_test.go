package controllers

import (
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/store/leasestore"
	"github.com/shipstream/bloodraven/topology"
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

func TestGroupWatchDropsStatusOnlyUpdates(t *testing.T) {
	base := func() *bloodravenv1alpha1.MysqlFailoverGroup {
		g := &bloodravenv1alpha1.MysqlFailoverGroup{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: "ns", Generation: 3, ResourceVersion: "10",
			Annotations: map[string]string{"a": "b"}, Labels: map[string]string{"l": "v"}, Finalizers: []string{Finalizer}}}
		g.Status.TopologyGeneration = 1
		return g
	}
	now := metav1.Now()
	tests := map[string]struct {
		mutate func(*bloodravenv1alpha1.MysqlFailoverGroup)
		want   bool
	}{
		"the controller's own status write": {func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
			g.ResourceVersion = "11"
			g.Status.TopologyGeneration = 2
		}, false},
		"a spec change (generation)": {func(g *bloodravenv1alpha1.MysqlFailoverGroup) { g.Generation = 4 }, true},
		"the revoke annotation": {func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
			g.Annotations[bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation] = "true"
		}, true},
		"a label":                           {func(g *bloodravenv1alpha1.MysqlFailoverGroup) { g.Labels["l"] = "w" }, true},
		"a finalizer removed by someone":    {func(g *bloodravenv1alpha1.MysqlFailoverGroup) { g.Finalizers = nil }, true},
		"deletion requested":                {func(g *bloodravenv1alpha1.MysqlFailoverGroup) { g.DeletionTimestamp = &now }, true},
		"a resync (nothing changed at all)": {func(*bloodravenv1alpha1.MysqlFailoverGroup) {}, false},
	}
	p := notStatusOnly()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			n := base()
			tc.mutate(n)
			if got := p.Update(event.UpdateEvent{ObjectOld: base(), ObjectNew: n}); got != tc.want {
				t.Fatalf("passes = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestALostOrMovingPrimaryIsReconciledAheadOfRoutineWork(t *testing.T) {
	lost := metav1.Now()
	up := []topology.SiteState{{Name: "iad", Reachable: true, Writable: true}, {Name: "pdx", Reachable: true}}
	down := []topology.SiteState{{Name: "iad"}, {Name: "pdx", Reachable: true}}
	tests := map[string]struct {
		status bloodravenv1alpha1.MysqlFailoverGroupStatus
		sites  []topology.SiteState
		want   int
	}{
		"a quiet group":                     {bloodravenv1alpha1.MysqlFailoverGroupStatus{ActiveSite: "iad"}, up, 0},
		"its primary just went unreachable": {bloodravenv1alpha1.MysqlFailoverGroupStatus{ActiveSite: "iad"}, down, PriorityUrgent},
		"inside the detection budget":       {bloodravenv1alpha1.MysqlFailoverGroupStatus{ActiveSite: "iad", PrimaryLostAt: &lost}, down, PriorityUrgent},
		"a transition under way":            {bloodravenv1alpha1.MysqlFailoverGroupStatus{ActiveSite: "iad", Transition: &bloodravenv1alpha1.TopologyTransition{TargetSite: "pdx"}}, up, PriorityUrgent},
		"a replica down is routine":         {bloodravenv1alpha1.MysqlFailoverGroupStatus{ActiveSite: "pdx"}, down, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := &bloodravenv1alpha1.MysqlFailoverGroup{Status: tc.status}
			if got := urgency(g, tc.sites); got == nil || *got != tc.want {
				t.Fatalf("priority %v, want %d (it must always be set: the queue keeps an earlier urgency otherwise)", got, tc.want)
			}
		})
	}
}

// The controller's table of operations is v1alpha1's list, in its order
// (the order reconcileOperations runs them and stability reports them).
func TestTheOperationTableIsThePlannedOperations(t *testing.T) {
	var names []bloodravenv1alpha1.OperationName
	for _, op := range operations() {
		names = append(names, op.name)
		if op.request == nil || op.reconcile == nil || op.promoting == "" || op.promoted == "" {
			t.Errorf("%s: incomplete entry", op.name)
		}
	}
	if !slices.Equal(names, bloodravenv1alpha1.PlannedOperations) {
		t.Errorf("table %v, want %v", names, bloodravenv1alpha1.PlannedOperations)
	}
}
