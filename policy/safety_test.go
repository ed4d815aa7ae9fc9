package policy

import (
	"strings"
	"testing"
	"time"
)

// A planned operation never waits inside a persisted transition (docs/failover.md,
// "Invariants"): a planned transition that cannot fence another site
// (the probe finds it unreachable) is rolled back at once, its target fenced
// first, and its operation readmitted; the emergency path decides from then
// on. An emergency or bootstrap transition keeps waiting, retrying and, for
// an emergency one, rolling back only after MinPromoteFailures failures over
// PromoteTimeout. A lost target comes before everything: nothing is rolled
// back (or reopened) while the target cannot be fenced.
func TestAPlannedTransitionNeverWaitsForAnotherSite(t *testing.T) {
	planned := func(failures int32, failingFor time.Duration) *Transition {
		tr := &Transition{TargetSite: "pdx", StartedAt: t0.Add(-time.Second), Failures: failures, Planned: true}
		if failures > 0 {
			tr.FailingSince = t0.Add(-failingFor)
		}
		return tr
	}
	emergency := func(failures int32, failingFor time.Duration) *Transition {
		tr := planned(failures, failingFor)
		tr.Planned = false
		return tr
	}
	tests := map[string]struct {
		transition  *Transition
		in          SafetyInput
		want        SafetyAction
		wantReadmit bool
		wantNamed   string // a site the reason names
	}{
		"a planned transition whose old primary is unreachable is rolled back at once, its operation readmitted": {
			transition: planned(1, 0), in: SafetyInput{Sites: sites(down("iad"), primary("pdx"))},
			want: ActionRollBack, wantReadmit: true, wantNamed: "iad"},
		"a planned transition that never failed is rolled back as soon as the probe loses a site": {
			transition: planned(0, 0), in: SafetyInput{Sites: sites(down("iad"), replica("pdx", 0))},
			want: ActionRollBack, wantReadmit: true, wantNamed: "iad"},
		"a planned transition with a lost third site is rolled back at once": {
			transition: planned(0, 0), in: SafetyInput{Sites: sites(replica("iad", 0), replica("pdx", 0), down("sfo"))},
			want: ActionRollBack, wantReadmit: true, wantNamed: "sfo"},
		"a planned transition whose target is lost waits: its target cannot be fenced": {
			transition: planned(1, 0), in: SafetyInput{Sites: sites(down("iad"), down("pdx"))},
			want: ActionNone},
		"a planned transition with every site reachable is resumed": {
			transition: planned(1, 0), in: SafetyInput{Sites: sites(replica("iad", 0), replica("pdx", 0))},
			want: ActionResume},
		"an emergency transition with the old primary lost is resumed, as before": {
			transition: emergency(2, time.Hour), in: SafetyInput{Sites: sites(down("iad"), replica("pdx", 0))},
			want: ActionResume},
		"an emergency transition is rolled back only after its failures span the promote timeout": {
			transition: emergency(MinPromoteFailures, time.Minute), in: SafetyInput{Sites: sites(down("iad"), replica("pdx", 0))},
			want: ActionRollBack},
		"an emergency transition failing for less than the promote timeout is resumed": {
			transition: emergency(MinPromoteFailures, 30*time.Second), in: SafetyInput{Sites: sites(down("iad"), replica("pdx", 0))},
			want: ActionResume},
		"a bootstrap with another site lost is resumed": {
			transition: &Transition{TargetSite: "iad", Bootstrap: true}, in: SafetyInput{Sites: sites(primary("iad"), down("pdx"))},
			want: ActionResume},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tc.in.Now, tc.in.ActiveSite, tc.in.Transition, tc.in.PromoteTimeout = t0, "iad", tc.transition, time.Minute
			got := DecideSafety(tc.in)
			if got.Action != tc.want || got.Readmit != tc.wantReadmit {
				t.Fatalf("got %+v, want action %d readmit %v", got, tc.want, tc.wantReadmit)
			}
			if got.Action != ActionNone && got.Site != tc.transition.TargetSite {
				t.Fatalf("got site %q, want the target %q", got.Site, tc.transition.TargetSite)
			}
			if !strings.Contains(got.Reason, tc.wantNamed) {
				t.Fatalf("reason %q does not name %s", got.Reason, tc.wantNamed)
			}
		})
	}
}

// A failed promotion attempt is decided on at once: a planned transition
// that could not fence and confirm another site is rolled back (its target
// fenced first) and its operation readmitted, so emergency failover is never
// held for the promote timeout. Every other failure is only counted
// (ActionNone), and DecideSafety retries it or rolls it back later.
func TestAFailedPlannedFenceRollsTheTransitionBackAtOnce(t *testing.T) {
	tests := map[string]struct {
		transition  Transition
		unfenced    string
		want        SafetyAction
		wantReadmit bool
	}{
		"a planned transition that could not fence the old primary is rolled back at once": {
			transition: Transition{TargetSite: "pdx", Planned: true, Failures: 1}, unfenced: "iad",
			want: ActionRollBack, wantReadmit: true},
		"a planned transition whose target failed is counted": {
			transition: Transition{TargetSite: "pdx", Planned: true, Failures: 1}, unfenced: "pdx",
			want: ActionNone},
		"a planned transition that failed otherwise is counted": {
			transition: Transition{TargetSite: "pdx", Planned: true, Failures: 1},
			want:       ActionNone},
		"an emergency transition that could not reach the old primary is counted, as before": {
			transition: Transition{TargetSite: "pdx", Failures: MinPromoteFailures}, unfenced: "iad",
			want: ActionNone},
		"a bootstrap is never rolled back": {
			transition: Transition{TargetSite: "iad", Bootstrap: true, Failures: 9}, unfenced: "pdx",
			want: ActionNone},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := DecidePromoteFailure(tc.transition, tc.unfenced)
			if got.Action != tc.want || got.Readmit != tc.wantReadmit {
				t.Fatalf("got %+v, want action %d readmit %v", got, tc.want, tc.wantReadmit)
			}
			if tc.want == ActionRollBack && (got.Site != "pdx" || !strings.Contains(got.Reason, "site "+tc.unfenced)) {
				t.Fatalf("got %+v, want a rollback of pdx naming %s", got, tc.unfenced)
			}
		})
	}
}
