package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/topology"
)

func TestPlannedReadySkipsNoSite(t *testing.T) {
	up := func(name string, replicating bool) topology.SiteState {
		return topology.SiteState{Name: name, Reachable: true, ReplicationRunning: replicating}
	}
	down := func(name string) topology.SiteState { return topology.SiteState{Name: name} }
	tests := map[string]struct {
		sites      []topology.SiteState
		want       bool
		wantReason string
		wantSite   string
	}{
		"every site reachable":        {sites: []topology.SiteState{up("iad", false), up("pdx", true)}, want: true},
		"the active site unreachable": {sites: []topology.SiteState{down("iad"), up("pdx", true)}, wantReason: WaitSiteUnreachable, wantSite: "site iad"},
		"a third site unreachable":    {sites: []topology.SiteState{up("iad", false), up("pdx", true), down("sfo")}, wantReason: WaitSiteUnreachable, wantSite: "site sfo"},
		"the target unreachable":      {sites: []topology.SiteState{up("iad", false), down("pdx")}, wantReason: WaitSiteUnreachable, wantSite: "site pdx"},
		"the target not replicating":  {sites: []topology.SiteState{up("iad", false), up("pdx", false)}, wantReason: WaitTargetNotReady, wantSite: "site pdx"},
		"the target lagging": {sites: []topology.SiteState{up("iad", false), {Name: "pdx", Reachable: true, ReplicationRunning: true, LagSeconds: 40}},
			wantReason: WaitTargetNotReady, wantSite: "site pdx lags 40 s"},
		// Seen end to end: a refused primary also stops the target's
		// replication; the operation waits for the primary, and says so.
		"the active site unreachable and the target not replicating from it": {sites: []topology.SiteState{down("iad"), up("pdx", false)},
			wantReason: WaitSiteUnreachable, wantSite: "site iad"},
	}
	for name, tc := range tests {
		ok, reason, msg := PlannedReady(tc.sites, "pdx", "iad")
		if ok != tc.want || reason != tc.wantReason || !strings.Contains(msg, tc.wantSite) {
			t.Errorf("%s: %v %q %q", name, ok, reason, msg)
		}
	}
}

func TestLeaseDecisionsAfterAMove(t *testing.T) {
	live := t0.Add(time.Minute)
	moved := t0.Add(-10 * time.Second)
	g := GroupView{UID: uid, Generation: 8, MovedAt: moved}
	releasedAt := func(r *leases.Record, at time.Time) *leases.Record { r.EndedAt = at; return r }
	migration := func(r *leases.Record) *leases.Record { r.Kind = leases.KindMigration; return r }
	tests := map[string]struct {
		decide func() Decision
		want   LeaseOutcome
	}{
		"release of a lease fenced by the move is a revocation": {
			decide: func() Decision { return DecideRelease(rec("a", leases.StateActive, 7, live), "tok-a", g, t0) }, want: OutcomeRevokeStale},
		"release of a lease that lapsed after the move is a revocation": {
			decide: func() Decision {
				return DecideRelease(rec("a", leases.StateActive, 7, moved.Add(time.Second)), "", g, t0)
			}, want: OutcomeRevokeStale},
		"release of a lease that lapsed before the move is nothing": {
			decide: func() Decision {
				return DecideRelease(rec("a", leases.StateActive, 7, moved.Add(-time.Second)), "", g, t0)
			}, want: OutcomeNothingToRelease},
		"release with a wrong token is still refused": {
			decide: func() Decision { return DecideRelease(rec("a", leases.StateActive, 7, live), "tok-b", g, t0) }, want: OutcomeTokenMismatch},
		"release seen through a stale view re-reads the group": {
			decide: func() Decision { return DecideRelease(rec("a", leases.StateActive, 9, live), "tok-a", g, t0) }, want: OutcomeStaleView},
		"a re-grant of an operation released after the move revokes it": {
			decide: func() Decision {
				return DecideGrant(GrantInput{Kind: leases.KindMigration, OperationID: "a", Group: g,
					Migration: migration(releasedAt(rec("a", leases.StateReleased, 7, live), moved.Add(time.Second))), Now: t0})
			}, want: OutcomeRevokeStale},
		"a take-over of a mutex that lapsed after the move revokes its operation first": {
			decide: func() Decision {
				return DecideGrant(GrantInput{Kind: leases.KindMigration, OperationID: "b", Group: g,
					Migration: migration(rec("a", leases.StateActive, 7, moved.Add(time.Second))), Now: t0})
			}, want: OutcomeRevokeStale},
		"a grant that sees a mutex newer than its view re-reads the group": {
			decide: func() Decision {
				return DecideGrant(GrantInput{Kind: leases.KindMigration, OperationID: "a", Group: g,
					Migration: migration(rec("b", leases.StateActive, 9, live)), Now: t0})
			}, want: OutcomeStaleView},
		"a grant while the revoke annotation stands is 423": {
			decide: func() Decision {
				v := g
				v.RevokePending = true
				return DecideGrant(GrantInput{Kind: leases.KindMigration, OperationID: "a", Group: v, Now: t0})
			}, want: OutcomeUnstable},
		"a renewal of a lease that lapsed after the move is a revocation, not 404": {
			decide: func() Decision {
				return DecideRenew(RenewInput{Kind: leases.KindMigration, OperationID: "a", Token: "tok-a", Group: g,
					Record: rec("a", leases.StateActive, 7, moved.Add(time.Second)), Now: t0})
			}, want: OutcomeRevokeStale},
		"a renewal seen through a stale view re-reads the group": {
			decide: func() Decision {
				return DecideRenew(RenewInput{Kind: leases.KindMigration, OperationID: "a", Token: "tok-a", Group: g,
					Record: rec("a", leases.StateActive, 9, live), Now: t0})
			}, want: OutcomeStaleView},
	}
	for name, tc := range tests {
		if d := tc.decide(); d.Outcome != tc.want {
			t.Errorf("%s: outcome %d, want %d", name, d.Outcome, tc.want)
		}
	}
}

func TestBookkeepingRevokesWhatTheMoveFenced(t *testing.T) {
	moved := t0.Add(-10 * time.Second)
	released := lease(leases.KindMigration, "a", leases.StateReleased, t0.Add(time.Minute))
	released.Generation, released.EndedAt = 1, moved.Add(time.Second)
	lapsed := lease(leases.KindMigration, "b", leases.StateActive, moved.Add(time.Second))
	lapsed.Generation = 1
	early := lease(leases.KindMigration, "c", leases.StateReleased, t0.Add(time.Minute))
	early.Generation, early.EndedAt = 1, moved.Add(-time.Second)
	// A hold recorded expired when its mutex lapsed before the move keeps
	// its own later expiresAt; it does not make its operation fenced.
	deadHold := lease(leases.KindFailoverHold, "d", leases.StateExpired, t0.Add(time.Minute))
	deadHold.Generation = 1
	got := DecideBookkeeping(BookkeepingInput{Now: t0, GroupUID: uid, Generation: 2, MovedAt: moved,
		Leases: []*leases.Record{released, lapsed, early, deadHold}})
	if strings.Join(got.Revoke, ",") != "a,b" || got.Reason != leases.ReasonTopologyChanged || len(got.Expire) != 0 {
		t.Fatalf("revoke %v (%s), expire %d; want a,b topology_changed, nothing expired", got.Revoke, got.Reason, len(got.Expire))
	}
}

func TestRetryTimeIsTheEarlierOfTheHoldAndItsMutex(t *testing.T) {
	mig := lease(leases.KindMigration, "a", leases.StateActive, t0.Add(10*time.Second))
	hold := lease(leases.KindFailoverHold, "a", leases.StateActive, t0.Add(2*time.Minute))
	adm := Admit(AdmissionInput{Now: t0, GroupUID: uid, Leases: []*leases.Record{mig, hold}, TargetReady: true})
	if adm.Verdict != DeferForHold || !adm.RetryTime.Equal(mig.ExpiresAt) {
		t.Fatalf("%+v, want deferred until the mutex's expiry %v", adm, mig.ExpiresAt)
	}
}
