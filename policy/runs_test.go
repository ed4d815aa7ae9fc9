package policy

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
)

func mt(t time.Time) *metav1.MicroTime { return &metav1.MicroTime{Time: t} }

func TestRunStatus(t *testing.T) {
	granted, live, past := t0.Add(-time.Minute), t0.Add(10*time.Second), t0.Add(-time.Second)
	started := func(r *leases.Record) *leases.Record { r.GrantedAt, r.HeldSince = granted, granted; return r }
	released := func(r *leases.Record, o leases.Outcome) *leases.Record {
		r.EndedAt, r.Outcome = t0.Add(-2*time.Second), o
		return r
	}
	revoked := func(r *leases.Record) *leases.Record {
		r.Reason, r.RevokedAt, r.RevokedAtGeneration = leases.ReasonTopologyChanged, t0.Add(-3*time.Second), 8
		return r
	}
	ended := bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunLostAfterDDL, Phase: "ddl", LeaseEnd: bloodravenv1alpha1.LeaseRevoked,
		StartTime: mt(granted), EndTime: mt(t0.Add(-3 * time.Second)), RevocationReason: leases.ReasonTopologyChanged, RevokedAtGeneration: 8}
	tests := map[string]struct {
		prev bloodravenv1alpha1.DeployRunStatus
		rec  *leases.Record
		want bloodravenv1alpha1.DeployRunStatus
	}{
		"a live mutex is a running run that started at its tenure": {
			rec:  started(rec("a", leases.StateActive, 7, live)),
			want: bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunRunning, Phase: "pre-ddl", StartTime: mt(granted)}},
		"the DDL boundary shows while it runs": {
			rec:  ddl(started(rec("a", leases.StateActive, 7, live))),
			want: bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunRunning, Phase: "ddl", StartTime: mt(granted)}},
		"a release reporting success is a succeeded run": {
			rec: phased(released(started(rec("a", leases.StateReleased, 7, live)), leases.OutcomeSucceeded), leases.PhaseDone),
			want: bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunSucceeded, Phase: "done", LeaseEnd: bloodravenv1alpha1.LeaseReleased,
				StartTime: mt(granted), EndTime: mt(t0.Add(-2 * time.Second))}},
		"a release without a report is a released run": {
			rec: released(started(rec("a", leases.StateReleased, 7, live)), ""),
			want: bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunReleased, Phase: "pre-ddl", LeaseEnd: bloodravenv1alpha1.LeaseReleased,
				StartTime: mt(granted), EndTime: mt(t0.Add(-2 * time.Second))}},
		"a move's revocation names the reason and the generation it wrote": {
			rec: revoked(ddl(started(rec("a", leases.StateRevoked, 7, live)))),
			want: bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunRevoked, Phase: "ddl", LeaseEnd: bloodravenv1alpha1.LeaseRevoked,
				StartTime: mt(granted), EndTime: mt(t0.Add(-3 * time.Second)), RevocationReason: leases.ReasonTopologyChanged, RevokedAtGeneration: 8}},
		"a revoked run keeps the outcome its client reported after it": {
			rec: func() *leases.Record {
				r := revoked(ddl(started(rec("a", leases.StateRevoked, 7, live))))
				r.Outcome = leases.OutcomeLostAfterDDL
				return r
			}(),
			want: ended},
		"a mutex past its expiry is an expired run, ended at the expiry": {
			rec: started(rec("a", leases.StateActive, 7, past)),
			want: bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunExpired, Phase: "pre-ddl", LeaseEnd: bloodravenv1alpha1.LeaseExpired,
				StartTime: mt(granted), EndTime: mt(past)}},
		"a stale live record does not reopen an ended run": {
			prev: ended, rec: ddl(started(rec("a", leases.StateActive, 7, live))), want: ended},
		"a stale ended record does not drop a reported outcome": {
			prev: ended, rec: revoked(ddl(started(rec("a", leases.StateRevoked, 7, live)))), want: ended},
		"a stale record does not move the phase back": {
			prev: bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunRunning, Phase: "ddl", StartTime: mt(granted)},
			rec:  started(rec("a", leases.StateActive, 7, live)),
			want: bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunRunning, Phase: "ddl", StartTime: mt(granted)}},
		"a record renewed past an expiry judged on an older one runs again": {
			prev: bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunExpired, Phase: "pre-ddl", LeaseEnd: bloodravenv1alpha1.LeaseExpired,
				StartTime: mt(granted), EndTime: mt(past)},
			rec:  started(rec("a", leases.StateActive, 7, live)),
			want: bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunRunning, Phase: "pre-ddl", StartTime: mt(granted)}},
		"a later tenure of the same operation runs again, from its first start": {
			prev: bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunExpired, Phase: "pre-ddl", LeaseEnd: bloodravenv1alpha1.LeaseExpired,
				StartTime: mt(granted.Add(-time.Hour)), EndTime: mt(granted.Add(-time.Minute))},
			rec:  started(rec("a", leases.StateActive, 7, live)),
			want: bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunRunning, Phase: "pre-ddl", StartTime: mt(granted.Add(-time.Hour))}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := RunStatus(tc.prev, tc.rec, t0); !equality.Semantic.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestRunDisplaced(t *testing.T) {
	granted := t0.Add(-time.Minute)
	running := bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunRunning, StartTime: mt(granted)}
	current := func(op string, since time.Time) *leases.Record {
		r := rec(op, leases.StateActive, 7, t0.Add(time.Minute))
		r.HeldSince = since
		return r
	}
	tests := map[string]struct {
		st      bloodravenv1alpha1.DeployRunStatus
		current *leases.Record
		want    bool
	}{
		"another operation's later tenure displaced a running run":     {st: running, current: current("b", t0), want: true},
		"the run's own record does not":                                {st: running, current: current("a", granted)},
		"a later tenure of the same operation does (issue 35, item 4)": {st: running, current: current("a", t0), want: true},
		"a record older than the run (a stale cache) does not":         {st: running, current: current("b", granted.Add(-time.Second))},
		"no record displaces nothing":                                  {st: running},
		"an ended run is not displaced":                                {st: bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunSucceeded, StartTime: mt(granted)}, current: current("b", t0)},
		"a run without a recorded start is left to its record sync":    {st: bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunRunning}, current: current("b", t0)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := RunDisplaced("a", tc.st, tc.current); got != tc.want {
				t.Fatalf("RunDisplaced = %v, want %v", got, tc.want)
			}
		})
	}
	if got := RunLost(running); got.Outcome != bloodravenv1alpha1.DeployRunUnknown || got.LeaseEnd != bloodravenv1alpha1.LeaseUnknown || got.StartTime == nil {
		t.Fatalf("RunLost(running) = %+v, want outcome and leaseEnd unknown, the start kept", got)
	}
}

func TestRunsToPrune(t *testing.T) {
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	tests := map[string]struct {
		runs    []RunView
		history int
		want    []string
	}{
		"within the history nothing goes": {history: 2,
			runs: []RunView{{Name: "a1", Instance: "a", Start: at(1)}, {Name: "a2", Instance: "a", Start: at(2)}}},
		"the oldest ended runs go first": {history: 2, want: []string{"a1", "a2"},
			runs: []RunView{{Name: "a3", Instance: "a", Start: at(3)}, {Name: "a1", Instance: "a", Start: at(1)},
				{Name: "a4", Instance: "a", Start: at(4)}, {Name: "a2", Instance: "a", Start: at(2)}}},
		"the history is per instance": {history: 1, want: []string{"a1"},
			runs: []RunView{{Name: "a1", Instance: "a", Start: at(1)}, {Name: "a2", Instance: "a", Start: at(2)},
				{Name: "b1", Instance: "b", Start: at(0)}}},
		"a running run is never pruned, and counts": {history: 2, want: []string{"a2"},
			runs: []RunView{{Name: "a1", Instance: "a", Start: at(1), Running: true}, {Name: "a2", Instance: "a", Start: at(2)},
				{Name: "a3", Instance: "a", Start: at(3)}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := RunsToPrune(tc.runs, tc.history); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("RunsToPrune = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDecideReport(t *testing.T) {
	live, past := t0.Add(10*time.Second), t0.Add(-time.Second)
	reported := func(r *leases.Record) *leases.Record { r.Outcome = leases.OutcomeFailed; return r }
	tests := map[string]struct {
		rec     *leases.Record
		token   string
		outcome leases.Outcome
		want    bool
	}{
		"a revoked record takes its client's report":   {rec: rec("a", leases.StateRevoked, 7, live), token: "tok-a", outcome: leases.OutcomeLostAfterDDL, want: true},
		"an expired record takes it":                   {rec: rec("a", leases.StateActive, 7, past), token: "tok-a", outcome: leases.OutcomeLostBeforeDDL, want: true},
		"another token's report is ignored":            {rec: rec("a", leases.StateRevoked, 7, live), token: "tok-b", outcome: leases.OutcomeSucceeded},
		"the first report stands":                      {rec: reported(rec("a", leases.StateReleased, 7, live)), token: "tok-a", outcome: leases.OutcomeSucceeded},
		"a live record is released, not reported here": {rec: rec("a", leases.StateActive, 7, live), token: "tok-a", outcome: leases.OutcomeSucceeded},
		"no report writes nothing":                     {rec: rec("a", leases.StateRevoked, 7, live), token: "tok-a"},
		"no record writes nothing":                     {token: "tok-a", outcome: leases.OutcomeFailed},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			next, ok := DecideReport(tc.rec, tc.token, tc.outcome, t0)
			if ok != tc.want {
				t.Fatalf("DecideReport = %v, want %v", ok, tc.want)
			}
			if ok && (next.Outcome != tc.outcome || next.State != tc.rec.State) {
				t.Fatalf("next = %+v: want the outcome %s and the state unchanged", next, tc.outcome)
			}
		})
	}
}

func TestRunBackstopDue(t *testing.T) {
	r := rec("a", leases.StateActive, 7, t0.Add(time.Minute))
	r.HeldSince = t0
	for name, tc := range map[string]struct {
		at   time.Time
		want bool
	}{
		"a record just written may be a grant about to be withdrawn": {at: t0.Add(time.Second)},
		"one older than the delay is a confirmed grant":              {at: t0.Add(RunBackstopDelay), want: true},
	} {
		t.Run(name, func(t *testing.T) {
			if got := RunBackstopDue(r, tc.at); got != tc.want {
				t.Fatalf("RunBackstopDue = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRunConditionsFollowTheOutcome(t *testing.T) {
	type want struct{ ready, reconciling, stalled, reason, message string }
	for _, tc := range []struct {
		name string
		st   bloodravenv1alpha1.DeployRunStatus
		want want
	}{
		{"a run not projected yet is reconciling", bloodravenv1alpha1.DeployRunStatus{},
			want{"False", "True", "False", "Running", "phase pre-ddl"}},
		{"a running run is reconciling, at its phase", bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunRunning, Phase: "ddl"},
			want{"False", "True", "False", "Running", "phase ddl"}},
		{"a succeeded run is ready", bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunSucceeded, LeaseEnd: bloodravenv1alpha1.LeaseReleased},
			want{"True", "False", "False", "Succeeded", "reported success"}},
		{"a run released without a report is ready", bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunReleased, LeaseEnd: bloodravenv1alpha1.LeaseReleased},
			want{"True", "False", "False", "Released", "without reporting"}},
		{"a failed run is stalled", bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunFailed, Phase: "ddl"},
			want{"False", "False", "True", "Failed", "ended failed at phase ddl"}},
		{"a revoked run is stalled with the revocation's reason", bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunRevoked, Phase: "pre-ddl",
			LeaseEnd: bloodravenv1alpha1.LeaseRevoked, RevocationReason: "topology_changed"},
			want{"False", "False", "True", "Revoked", "revoked (topology_changed) at phase pre-ddl"}},
		{"a run lost past its DDL boundary is stalled and says the database is gated", bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunLostAfterDDL},
			want{"False", "False", "True", "LostAfterDDL", "verifies the schema"}},
		{"a run lost before its DDL boundary", bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunLostBeforeDDL},
			want{"False", "False", "True", "LostBeforeDDL", "lost-before-ddl"}},
		{"an abort that failed", bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunAbortFailed},
			want{"False", "False", "True", "AbortFailed", "abort-failed"}},
		{"an expired run is stalled", bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunExpired},
			want{"False", "False", "True", "Expired", "expired"}},
		{"a run that ended unknown is stalled", bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunUnknown},
			want{"False", "False", "True", "Unknown", "unknown"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := RunConditions(tc.st, 3, t0)
			if got.ObservedGeneration != 3 || len(got.Conditions) != 3 {
				t.Fatalf("observedGeneration %d, %d conditions", got.ObservedGeneration, len(got.Conditions))
			}
			for typ, status := range map[string]string{"Ready": tc.want.ready, "Reconciling": tc.want.reconciling, "Stalled": tc.want.stalled} {
				c := meta.FindStatusCondition(got.Conditions, typ)
				if c == nil || string(c.Status) != status || c.Reason != tc.want.reason || !strings.Contains(c.Message, tc.want.message) ||
					c.ObservedGeneration != 3 || !c.LastTransitionTime.Time.Equal(t0) {
					t.Errorf("%s: %+v, want %s, reason %s, message with %q, at generation 3 and %v", typ, c, status, tc.want.reason, tc.want.message, t0)
				}
			}
			if tc.st.Conditions != nil {
				t.Fatal("the input was changed")
			}
		})
	}
}

func TestRunConditionsKeepTheTransitionOfAnUnchangedStatus(t *testing.T) {
	running := RunConditions(bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunRunning, Phase: "pre-ddl"}, 1, t0)
	later := t0.Add(time.Minute)
	again := running
	again.Phase = "ddl"
	again = RunConditions(again, 1, later)
	if c := meta.FindStatusCondition(again.Conditions, "Reconciling"); !c.LastTransitionTime.Time.Equal(t0) || !strings.Contains(c.Message, "phase ddl") {
		t.Errorf("Reconciling after a phase change: %+v, want its transition kept at %v and the new phase in its message", c, t0)
	}
	if c := meta.FindStatusCondition(running.Conditions, "Reconciling"); strings.Contains(c.Message, "phase ddl") {
		t.Error("RunConditions changed the conditions of its input")
	}
	ended := running
	ended.Outcome = bloodravenv1alpha1.DeployRunSucceeded
	ended = RunConditions(ended, 1, later)
	if c := meta.FindStatusCondition(ended.Conditions, "Ready"); c.Status != metav1.ConditionTrue || !c.LastTransitionTime.Time.Equal(later) {
		t.Errorf("Ready after success: %+v, want True since %v", c, later)
	}
	if again := RunConditions(ended, 1, later.Add(time.Hour)); !equality.Semantic.DeepEqual(again, ended) {
		t.Error("projecting an unchanged status again changed it: every sync would write")
	}
}
