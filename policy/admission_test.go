package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/topology"
)

const uid = "group-uid"

func lease(kind leases.Kind, op string, state leases.State, expires time.Time) *leases.Record {
	return &leases.Record{GroupUID: uid, Kind: kind, OperationID: op, Instance: "counter-app", State: state, ExpiresAt: expires}
}

// held is op's live migration mutex and its failover-hold.
func held(op string, state leases.State, holdExpires time.Time) []*leases.Record {
	return []*leases.Record{lease(leases.KindMigration, op, leases.StateActive, t0.Add(time.Hour)), lease(leases.KindFailoverHold, op, state, holdExpires)}
}

func TestAdmit(t *testing.T) {
	soon, later := t0.Add(10*time.Second), t0.Add(40*time.Second)
	recs := func(rs ...[]*leases.Record) []*leases.Record {
		var out []*leases.Record
		for _, r := range rs {
			out = append(out, r...)
		}
		return out
	}
	tests := map[string]struct {
		in          AdmissionInput
		want        AdmissionVerdict
		wantRetry   time.Time
		wantBlocker string
		wantLapsed  int
		wantRevoke  int
	}{
		"nothing held": {in: AdmissionInput{TargetReady: true}, want: Admitted},
		"a migration lease alone defers nothing": {
			in: AdmissionInput{TargetReady: true, Leases: []*leases.Record{lease(leases.KindMigration, "a", leases.StateActive, later)}}, want: Admitted},
		"a live hold defers until its expiry": {
			in:   AdmissionInput{TargetReady: true, Leases: held("a", leases.StateActive, later)},
			want: DeferForHold, wantRetry: later, wantBlocker: "a"},
		"a hold whose operation lost the mutex defers nothing": {
			in: AdmissionInput{TargetReady: true, Leases: recs(
				[]*leases.Record{lease(leases.KindMigration, "b", leases.StateActive, later), lease(leases.KindFailoverHold, "a", leases.StateActive, later)})},
			want: Admitted, wantLapsed: 1},
		"a hold whose mutex expired defers nothing": {
			in: AdmissionInput{TargetReady: true, Leases: recs(
				[]*leases.Record{lease(leases.KindMigration, "a", leases.StateActive, t0.Add(-time.Second)), lease(leases.KindFailoverHold, "a", leases.StateActive, later)})},
			want: Admitted, wantLapsed: 1},
		"a hold whose mutex was released defers nothing": {
			in: AdmissionInput{TargetReady: true, Leases: recs(
				[]*leases.Record{lease(leases.KindMigration, "a", leases.StateReleased, later), lease(leases.KindFailoverHold, "a", leases.StateActive, later)})},
			want: Admitted, wantLapsed: 1},
		"of two holds only the mutex holder's defers": {
			in: AdmissionInput{TargetReady: true, Leases: recs(held("b", leases.StateActive, soon),
				[]*leases.Record{lease(leases.KindFailoverHold, "a", leases.StateActive, t0.Add(time.Second))})},
			want: DeferForHold, wantRetry: soon, wantBlocker: "b"},
		"an expired hold defers nothing and is lapsed": {
			in: AdmissionInput{TargetReady: true, Leases: held("a", leases.StateActive, t0.Add(-time.Nanosecond))}, want: Admitted, wantLapsed: 1},
		"a hold at exactly its expiry still defers": {
			in:   AdmissionInput{TargetReady: true, Leases: held("a", leases.StateActive, t0)},
			want: DeferForHold, wantRetry: t0, wantBlocker: "a"},
		"released and revoked holds defer nothing": {
			in: AdmissionInput{TargetReady: true, Leases: recs(held("a", leases.StateReleased, later),
				[]*leases.Record{lease(leases.KindFailoverHold, "b", leases.StateRevoked, later)})}, want: Admitted},
		"a hold of a deleted group of the same name defers nothing": {
			in: AdmissionInput{TargetReady: true, Leases: []*leases.Record{
				{GroupUID: "old", Kind: leases.KindMigration, OperationID: "a", Instance: "counter-app", State: leases.StateActive, ExpiresAt: later},
				{GroupUID: "old", Kind: leases.KindFailoverHold, OperationID: "a", Instance: "counter-app", State: leases.StateActive, ExpiresAt: later}}},
			want: Admitted},
		"an unready target waits": {in: AdmissionInput{TargetReady: false, TargetReason: "target site pdx is unreachable"}, want: WaitForTarget},
		"a spent deferral budget: the live hold is revoked and the operation proceeds": {
			in:   AdmissionInput{TargetReady: true, BudgetSpent: true, Leases: held("a", leases.StateActive, later)},
			want: Admitted, wantRevoke: 1},
		"a spent budget revokes only live holds; a lapsed one is only lapsed": {
			in: AdmissionInput{TargetReady: true, BudgetSpent: true, Leases: recs(held("b", leases.StateActive, later),
				[]*leases.Record{lease(leases.KindFailoverHold, "a", leases.StateActive, later)})},
			want: Admitted, wantRevoke: 1, wantLapsed: 1},
		"a spent budget with an unready target still revokes, then waits": {
			in:   AdmissionInput{TargetReady: false, BudgetSpent: true, Leases: held("a", leases.StateActive, later)},
			want: WaitForTarget, wantRevoke: 1},
		"a hold is reported before an unready target": {
			in:   AdmissionInput{TargetReady: false, Leases: held("a", leases.StateActive, later)},
			want: DeferForHold, wantRetry: later, wantBlocker: "a"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tc.in.Now, tc.in.GroupUID = t0, uid
			got := Admit(tc.in)
			if got.Verdict != tc.want || !got.RetryTime.Equal(tc.wantRetry) || len(got.Lapsed) != tc.wantLapsed || len(got.Revoke) != tc.wantRevoke {
				t.Fatalf("got %+v, want verdict %d retry %v", got, tc.want, tc.wantRetry)
			}
			if tc.wantBlocker != "" {
				if got.Blocker.OperationID != tc.wantBlocker || !strings.Contains(got.Message, "operation "+tc.wantBlocker) || !strings.Contains(got.Message, "instance counter-app") {
					t.Fatalf("blocker %+v message %q", got.Blocker, got.Message)
				}
			}
		})
	}
}

func sites(states ...topology.SiteState) []topology.SiteState { return states }

var (
	primary = func(n string) topology.SiteState { return topology.SiteState{Name: n, Reachable: true, Writable: true} }
	replica = func(n string, lag float64) topology.SiteState {
		return topology.SiteState{Name: n, Reachable: true, ReplicationRunning: true, LagSeconds: lag}
	}
	down = func(n string) topology.SiteState { return topology.SiteState{Name: n} }
)

func TestDecideSafety(t *testing.T) {
	lost := func(ago time.Duration) time.Time { return t0.Add(-ago) }
	budget := 30 * time.Second
	tests := map[string]struct {
		in       SafetyInput
		want     SafetyAction
		wantSite string
	}{
		"healthy":              {in: SafetyInput{ActiveSite: "iad", Sites: sites(primary("iad"), replica("pdx", 0))}, want: ActionNone},
		"transition in flight": {in: SafetyInput{ActiveSite: "iad", Transition: &Transition{TargetSite: "pdx", StartedAt: t0}, Sites: sites(down("iad"), replica("pdx", 0))}, want: ActionResume, wantSite: "pdx"},
		"a transition whose target is unreachable reopens nothing": {
			in: SafetyInput{ActiveSite: "iad", Transition: &Transition{TargetSite: "pdx", StartedAt: t0.Add(-time.Hour), Failures: 9}, PromoteTimeout: time.Minute,
				Sites: sites(replica("iad", 0), down("pdx"))}, want: ActionNone},
		"a failing transition is retried within the promote timeout": {
			in: SafetyInput{ActiveSite: "iad", Transition: &Transition{TargetSite: "pdx", StartedAt: t0.Add(-time.Hour), FailingSince: t0.Add(-30 * time.Second), Failures: 5}, PromoteTimeout: time.Minute,
				Sites: sites(replica("iad", 0), replica("pdx", 0))}, want: ActionResume, wantSite: "pdx"},
		"a transition past its timeout without failures is retried": {
			in: SafetyInput{ActiveSite: "iad", Transition: &Transition{TargetSite: "pdx", StartedAt: t0.Add(-time.Hour)}, PromoteTimeout: time.Minute,
				Sites: sites(replica("iad", 0), replica("pdx", 0))}, want: ActionResume, wantSite: "pdx"},
		"a transition that keeps failing is rolled back, its target fenced": {
			in: SafetyInput{ActiveSite: "iad", Transition: &Transition{TargetSite: "pdx", StartedAt: t0.Add(-time.Minute), FailingSince: t0.Add(-time.Minute), Failures: MinPromoteFailures}, PromoteTimeout: time.Minute,
				Sites: sites(replica("iad", 0), primary("pdx"))}, want: ActionRollBack, wantSite: "pdx"},
		"failures of a target that just came back do not roll it back at once": {
			in: SafetyInput{ActiveSite: "iad", Transition: &Transition{TargetSite: "pdx", StartedAt: t0.Add(-time.Hour), FailingSince: t0.Add(-10 * time.Second), Failures: 4}, PromoteTimeout: time.Minute,
				Sites: sites(replica("iad", 0), primary("pdx"))}, want: ActionResume, wantSite: "pdx"},
		"a bootstrap is never rolled back": {
			in: SafetyInput{Transition: &Transition{TargetSite: "iad", StartedAt: t0.Add(-time.Hour), FailingSince: t0.Add(-time.Hour), Failures: 9, Bootstrap: true}, PromoteTimeout: time.Minute,
				Sites: sites(primary("iad"), replica("pdx", 0))}, want: ActionResume, wantSite: "iad"},
		"bootstrap one writable site":          {in: SafetyInput{Sites: sites(primary("iad"), replica("pdx", 0))}, want: ActionBootstrap, wantSite: "iad"},
		"no bootstrap without a writable site": {in: SafetyInput{Sites: sites(down("iad"), down("pdx"))}, want: ActionNone},
		"no bootstrap with two writable sites": {in: SafetyInput{Sites: sites(primary("iad"), primary("pdx"))}, want: ActionNone},
		"a returning old primary is fenced first": {
			in: SafetyInput{ActiveSite: "pdx", Sites: sites(primary("iad"), primary("pdx"))}, want: ActionFence, wantSite: "iad"},
		"fencing comes before a lost-primary check": {
			in: SafetyInput{ActiveSite: "pdx", Sites: sites(primary("iad"), down("pdx"))}, want: ActionFence, wantSite: "iad"},
		"primary lost: mark the time": {in: SafetyInput{ActiveSite: "iad", Budget: budget, Sites: sites(down("iad"), replica("pdx", 0))}, want: ActionMarkLost},
		"primary lost within the budget: wait": {
			in: SafetyInput{ActiveSite: "iad", Budget: budget, PrimaryLostAt: lost(29 * time.Second), Sites: sites(down("iad"), replica("pdx", 0))}, want: ActionNone},
		"primary lost for the budget: promote": {
			in: SafetyInput{ActiveSite: "iad", Budget: budget, PrimaryLostAt: lost(30 * time.Second), Sites: sites(down("iad"), replica("pdx", 0))}, want: ActionEmergencyPromote, wantSite: "pdx"},
		"emergency picks the least lag": {
			in: SafetyInput{ActiveSite: "iad", Budget: budget, PrimaryLostAt: lost(time.Minute), Sites: sites(down("iad"), replica("pdx", 5), replica("sfo", 1))}, want: ActionEmergencyPromote, wantSite: "sfo"},
		"emergency prefers a replicating site": {
			in: SafetyInput{ActiveSite: "iad", Budget: budget, PrimaryLostAt: lost(time.Minute),
				Sites: sites(down("iad"), topology.SiteState{Name: "pdx", Reachable: true}, replica("sfo", 9))}, want: ActionEmergencyPromote, wantSite: "sfo"},
		"emergency without a candidate waits": {
			in: SafetyInput{ActiveSite: "iad", Budget: budget, PrimaryLostAt: lost(time.Minute), Sites: sites(down("iad"), down("pdx"))}, want: ActionNone},
		"primary back: clear the mark": {
			in: SafetyInput{ActiveSite: "iad", Budget: budget, PrimaryLostAt: lost(time.Second), Sites: sites(primary("iad"), replica("pdx", 0))}, want: ActionClearLost},
		"a fenced site that does not replicate rejoins": {
			in: SafetyInput{ActiveSite: "pdx", Sites: sites(topology.SiteState{Name: "iad", Reachable: true}, primary("pdx"))}, want: ActionRejoin, wantSite: "iad"},
		"read-only primary is reasserted": {
			in: SafetyInput{ActiveSite: "iad", Sites: sites(replica("iad", 0), replica("pdx", 0))}, want: ActionReassert, wantSite: "iad"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tc.in.Now = t0
			got := DecideSafety(tc.in)
			if got.Action != tc.want || got.Site != tc.wantSite {
				t.Fatalf("got %+v, want action %d site %q", got, tc.want, tc.wantSite)
			}
		})
	}
}

// The detection budget starts at the first failed probe of the current run
// when the prober knows it, never later than now and never in the future: a
// fleet queued in front of the mark does not lengthen it, and nothing
// shortens it below the time the failure was seen.
func TestAMarkedLossStartsAtTheFirstFailedProbe(t *testing.T) {
	budget := 5 * time.Second
	tests := map[string]struct {
		since       time.Time
		down        bool // pdx is unreachable too
		wantLostAt  time.Time
		wantRequeue time.Duration
	}{
		"unknown: now":       {wantLostAt: t0, wantRequeue: budget},
		"seen 3 s ago: then": {since: t0.Add(-3 * time.Second), wantLostAt: t0.Add(-3 * time.Second), wantRequeue: 2 * time.Second},
		"seen a budget ago, nothing to promote: mark, look again at once": {since: t0.Add(-time.Minute), down: true, wantLostAt: t0.Add(-time.Minute), wantRequeue: time.Millisecond},
		"seen 2.5 s ago: rounded up to the second the status keeps":       {since: t0.Add(-2500 * time.Millisecond), wantLostAt: t0.Add(-2 * time.Second), wantRequeue: 3 * time.Second},
		"a time after now is not believed":                                {since: t0.Add(time.Second), wantLostAt: t0, wantRequeue: budget},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pdx := replica("pdx", 0)
			if tc.down {
				pdx = down("pdx")
			}
			got := DecideSafety(SafetyInput{Now: t0, ActiveSite: "iad", Budget: budget, ActiveUnreachableSince: tc.since,
				Sites: sites(down("iad"), pdx)})
			if got.Action != ActionMarkLost || !got.LostAt.Equal(tc.wantLostAt) || got.RequeueAfter != tc.wantRequeue {
				t.Fatalf("got %+v, want mark at %v, requeue %v", got, tc.wantLostAt, tc.wantRequeue)
			}
		})
	}
}

// A group whose turn comes after the prober has seen its primary fail for
// the whole budget is promoted at once: no mark, no second reconcile. One
// seen for less waits the rest; one that answered in between starts over
// (the prober clears its memory on an answer: ActiveUnreachableSince zero).
func TestABudgetSpentInTheQueueIsNotWaitedAgain(t *testing.T) {
	budget := 5 * time.Second
	tests := map[string]struct {
		since time.Time
		want  SafetyAction
	}{
		"failing for the budget: promote":           {since: t0.Add(-budget), want: ActionEmergencyPromote},
		"failing for longer: promote":               {since: t0.Add(-time.Minute), want: ActionEmergencyPromote},
		"failing for less: mark":                    {since: t0.Add(-budget + time.Millisecond), want: ActionMarkLost},
		"no failure remembered (it answered): mark": {want: ActionMarkLost},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := DecideSafety(SafetyInput{Now: t0, ActiveSite: "iad", Budget: budget, ActiveUnreachableSince: tc.since,
				Sites: sites(down("iad"), replica("pdx", 0))})
			if got.Action != tc.want || (tc.want == ActionEmergencyPromote && got.Site != "pdx") {
				t.Fatalf("got %+v, want action %d", got, tc.want)
			}
		})
	}
}

func TestObserve(t *testing.T) {
	cond := func(cs []ConditionValue, typ string) bool {
		for _, c := range cs {
			if c.Type == typ {
				return c.True
			}
		}
		t.Fatalf("no %s condition", typ)
		return false
	}
	tests := map[string]struct {
		active                                    string
		sites                                     []topology.SiteState
		ready, degraded, split, noPrimary, replOK bool
		lag                                       float64
	}{
		"healthy":                 {active: "iad", sites: sites(primary("iad"), replica("pdx", 0.4)), ready: true, replOK: true, lag: 0.4},
		"replica down":            {active: "iad", sites: sites(primary("iad"), down("pdx")), ready: true, degraded: true},
		"replica not replicating": {active: "iad", sites: sites(primary("iad"), topology.SiteState{Name: "pdx", Reachable: true}), ready: true, degraded: true},
		"primary down":            {active: "iad", sites: sites(down("iad"), replica("pdx", 0)), degraded: true, noPrimary: true},
		"split brain":             {active: "iad", sites: sites(primary("iad"), primary("pdx")), split: true, degraded: true},
		"not bootstrapped":        {active: "", sites: sites(down("iad"), down("pdx")), degraded: true, noPrimary: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h, cs := ObserveHealth(tc.active, tc.sites)
			if h.Ready != tc.ready || cond(cs, "Ready") != tc.ready || cond(cs, "Degraded") != tc.degraded ||
				cond(cs, "SplitBrain") != tc.split || cond(cs, "NoPrimary") != tc.noPrimary || h.ReplicationLagSeconds != tc.lag {
				t.Fatalf("health %+v conditions %+v", h, cs)
			}
			if tc.replOK != h.ReplicationRunning {
				t.Fatalf("replicationRunning = %v, want %v", h.ReplicationRunning, tc.replOK)
			}
		})
	}
}
