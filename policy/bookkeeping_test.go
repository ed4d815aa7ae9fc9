package policy

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/topology"
)

func ttl(r *leases.Record, s int64) *leases.Record { r.TTLSeconds = s; return r }

func ended(r *leases.Record, at time.Time) *leases.Record { r.EndedAt = at; return r }

func TestDecideBookkeeping(t *testing.T) {
	live, past := t0.Add(time.Minute), t0.Add(-time.Second)
	at := func(r *leases.Record, gen int64) *leases.Record { r.Generation = gen; return r }
	foreign := &leases.Record{GroupUID: "old", Kind: leases.KindMigration, OperationID: "z", State: leases.StateActive, ExpiresAt: live}
	tests := map[string]struct {
		in                   BookkeepingInput
		wantRevoke           []string
		wantReason           string
		wantExpire, wantGone int
		wantDeleted          int
		wantRecheck          time.Time
	}{
		"current leases are left alone": {
			in: BookkeepingInput{Generation: 2, Leases: []*leases.Record{at(lease(leases.KindMigration, "a", leases.StateActive, live), 2)}}},
		"a live lease of another generation is revoked, topology_changed": {
			in:         BookkeepingInput{Generation: 3, Leases: []*leases.Record{at(lease(leases.KindMigration, "a", leases.StateActive, live), 2)}},
			wantRevoke: []string{"a"}, wantReason: leases.ReasonTopologyChanged},
		// Issue 35, item 5: a record the move fences that may still be a
		// grant in flight (never renewed, granted less than
		// leases.ConfirmWindow ago) is left to its request, which
		// withdraws it if it landed after the move; decided again later.
		"a fenced record that may be a grant in flight waits for its request": {
			in: BookkeepingInput{Generation: 3, MovedAt: t0.Add(-time.Second), Leases: []*leases.Record{
				grantedAt(at(lease(leases.KindMigration, "a", leases.StateActive, live), 2), t0.Add(-2*time.Second))}},
			wantRecheck: t0.Add(-2*time.Second + leases.ConfirmWindow)},
		"once the window ends it is revoked": {
			in: BookkeepingInput{Generation: 3, MovedAt: t0.Add(-time.Minute), Leases: []*leases.Record{
				grantedAt(at(lease(leases.KindMigration, "a", leases.StateActive, live), 2), t0.Add(-leases.ConfirmWindow))}},
			wantRevoke: []string{"a"}, wantReason: leases.ReasonTopologyChanged},
		"a renewed record is revoked at once (its token was delivered)": {
			in: BookkeepingInput{Generation: 3, MovedAt: t0.Add(-time.Second), Leases: []*leases.Record{
				renewedAt(grantedAt(at(lease(leases.KindMigration, "a", leases.StateActive, live), 2), t0.Add(-2*time.Second)), t0.Add(-time.Second))}},
			wantRevoke: []string{"a"}, wantReason: leases.ReasonTopologyChanged},
		"the revoke annotation revokes every live lease, operator_revoked": {
			in: BookkeepingInput{Generation: 2, RevokeAll: true, Leases: []*leases.Record{
				at(lease(leases.KindMigration, "b", leases.StateActive, live), 2), at(lease(leases.KindFailoverHold, "b", leases.StateActive, live), 2),
				at(lease(leases.KindFailoverHold, "a", leases.StateActive, live), 2)}},
			wantRevoke: []string{"a", "b"}, wantReason: leases.ReasonOperatorRevoked},
		"an expired active lease is recorded as expired": {
			in:         BookkeepingInput{Generation: 2, Leases: []*leases.Record{at(lease(leases.KindMigration, "a", leases.StateActive, past), 2)}},
			wantExpire: 1},
		"a hold whose operation lost the mutex is recorded as expired": {
			in: BookkeepingInput{Generation: 2, Leases: []*leases.Record{
				at(lease(leases.KindMigration, "b", leases.StateActive, live), 2), at(lease(leases.KindFailoverHold, "a", leases.StateActive, live), 2)}},
			wantExpire: 1},
		"terminal records need nothing": {
			in: BookkeepingInput{Generation: 5, Leases: []*leases.Record{
				at(lease(leases.KindMigration, "a", leases.StateReleased, live), 2), at(lease(leases.KindFailoverHold, "a", leases.StateRevoked, live), 2)}}},
		"a hold ended longer ago than its ttl is deleted (history is bounded)": {
			in: BookkeepingInput{Generation: 2, Leases: []*leases.Record{
				ttl(at(lease(leases.KindFailoverHold, "a", leases.StateReleased, t0.Add(-31*time.Second)), 2), 30),
				ttl(at(lease(leases.KindFailoverHold, "b", leases.StateExpired, t0.Add(-31*time.Second)), 2), 30),
				ttl(at(lease(leases.KindFailoverHold, "c", leases.StateRevoked, t0.Add(-31*time.Second)), 2), 30)}},
			wantDeleted: 3},
		"a hold ended within its ttl, an active one, the mutex are kept": {
			in: BookkeepingInput{Generation: 2, Leases: []*leases.Record{
				ttl(at(lease(leases.KindFailoverHold, "a", leases.StateReleased, t0.Add(-29*time.Second)), 2), 30),
				ttl(at(lease(leases.KindMigration, "b", leases.StateReleased, t0.Add(-time.Hour)), 2), 30),
				ttl(at(lease(leases.KindFailoverHold, "c", leases.StateActive, t0.Add(-time.Hour)), 2), 30)}},
			wantExpire: 1},
		"a hold released late counts from its release": {
			in: BookkeepingInput{Generation: 2, Leases: []*leases.Record{
				ended(ttl(at(lease(leases.KindFailoverHold, "a", leases.StateReleased, t0.Add(-time.Hour)), 2), 30), t0.Add(-10*time.Second))}}},
		"records of a deleted group of the same name are cleaned up, never revoked": {
			in:       BookkeepingInput{Generation: 5, RevokeAll: true, Leases: []*leases.Record{foreign}},
			wantGone: 1, wantReason: leases.ReasonOperatorRevoked},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tc.in.Now, tc.in.GroupUID = t0, uid
			got := DecideBookkeeping(tc.in)
			if !slices.Equal(got.Revoke, tc.wantRevoke) || len(got.Expire) != tc.wantExpire || len(got.Foreign) != tc.wantGone || len(got.Delete) != tc.wantDeleted {
				t.Fatalf("got %+v", got)
			}
			if !got.RecheckAt.Equal(tc.wantRecheck) {
				t.Fatalf("recheck at %v, want %v", got.RecheckAt, tc.wantRecheck)
			}
			if tc.wantReason != "" && got.Reason != tc.wantReason {
				t.Fatalf("reason %q, want %q", got.Reason, tc.wantReason)
			}
		})
	}
}

func TestReservationStands(t *testing.T) {
	res := Request{Operation: "OrderedUpdate", ID: "r7"}
	tests := map[string]struct {
		requests     []Request
		transitionOp bloodravenv1alpha1.OperationName
		want         bool
	}{
		"its request stands":                      {requests: []Request{res}, want: true},
		"the request was removed":                 {want: false},
		"the request was replaced":                {requests: []Request{{Operation: "OrderedUpdate", ID: "r8"}}, want: false},
		"another operation's request":             {requests: []Request{{Operation: "PlannedFailover", ID: "r7"}}, want: false},
		"removed, but its transition runs on":     {transitionOp: "OrderedUpdate", want: true},
		"removed, another operation's transition": {transitionOp: "EmergencyFailover", want: false},
	}
	for name, tc := range tests {
		if got := ReservationStands(res, tc.requests, tc.transitionOp); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

func TestBestSiteIsTheOneRule(t *testing.T) {
	tests := map[string]struct {
		sites   []topology.SiteState
		exclude string
		want    string
	}{
		"the least lag wins":                {sites: sites(down("iad"), replica("pdx", 5), replica("sfo", 1)), exclude: "iad", want: "sfo"},
		"a replicating site comes first":    {sites: sites(down("iad"), topology.SiteState{Name: "pdx", Reachable: true}, replica("sfo", 9)), exclude: "iad", want: "sfo"},
		"the excluded site is never chosen": {sites: sites(primary("iad"), replica("pdx", 0)), exclude: "iad", want: "pdx"},
		"spec order breaks ties":            {sites: sites(down("iad"), replica("pdx", 1), replica("sfo", 1)), exclude: "iad", want: "pdx"},
		"no reachable site":                 {sites: sites(down("iad"), down("pdx")), exclude: "iad", want: ""},
	}
	for name, tc := range tests {
		if got := BestSite(tc.sites, tc.exclude); got != tc.want {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}
}

// The pure core links no client: policy and leases import neither
// controller-runtime nor client-go, so every decision is testable without
// a server and cannot do I/O.
func TestPureCoreLinksNoClient(t *testing.T) {
	for _, pkg := range []string{"github.com/shipstream/bloodraven/policy", "github.com/shipstream/bloodraven/leases"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "sigs.k8s.io/controller-runtime") || strings.HasPrefix(dep, "k8s.io/client-go") {
				t.Errorf("%s links %s", pkg, dep)
			}
		}
	}
}

// grantedAt is r granted at at and never renewed since.
func grantedAt(r *leases.Record, at time.Time) *leases.Record {
	r.GrantedAt, r.RenewedAt, r.HeldSince = at, at, at
	return r
}

// renewedAt is r renewed at at.
func renewedAt(r *leases.Record, at time.Time) *leases.Record { r.RenewedAt = at; return r }

// Issue 35 ("also fix"): a grant that landed between the revocation's list
// and the revoke annotation's removal is revoked on a second list; grants
// decided after the removal are not.
func TestLateGrants(t *testing.T) {
	removed := t0.Add(-time.Second)
	mk := func(op string, granted time.Time, state leases.State) *leases.Record {
		r := lease(leases.KindMigration, op, state, t0.Add(time.Minute))
		r.GrantedAt = granted
		return r
	}
	got := LateGrants([]*leases.Record{
		mk("late", removed.Add(-time.Millisecond), leases.StateActive),
		mk("after", removed.Add(time.Millisecond), leases.StateActive),
		mk("revoked", removed.Add(-time.Second), leases.StateRevoked),
		{GroupUID: "old", Kind: leases.KindMigration, OperationID: "foreign", State: leases.StateActive, ExpiresAt: t0.Add(time.Minute), GrantedAt: removed.Add(-time.Second)},
	}, uid, removed, t0)
	if !slices.Equal(got, []string{"late"}) {
		t.Fatalf("LateGrants = %v, want [late]", got)
	}
}
