package policy

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
)

func TestCloseGate(t *testing.T) {
	live, past := t0.Add(10*time.Second), t0.Add(-time.Second)
	pending := bloodravenv1alpha1.MysqlDatabaseStatus{PendingVerification: &bloodravenv1alpha1.SchemaVerification{OperationID: "z"}}
	tests := map[string]struct {
		st        bloodravenv1alpha1.MysqlDatabaseStatus
		rec       *leases.Record
		changed   bool
		wantEnded string
	}{
		"a released operation past its DDL boundary closes the gate": {rec: ddl(rec("a", leases.StateReleased, 7, live)), changed: true, wantEnded: "released"},
		"an expired one closes it":                                   {rec: ddl(rec("a", leases.StateActive, 7, past)), changed: true, wantEnded: "expired"},
		"a revoked one closes it, with the reason":                   {rec: revokedFor(ddl(rec("a", leases.StateRevoked, 7, live)), leases.ReasonTopologyChanged), changed: true, wantEnded: "revoked"},
		"a live one does not":                                        {rec: ddl(rec("a", leases.StateActive, 7, live))},
		"one that confirmed its end does not":                        {rec: phased(rec("a", leases.StateReleased, 7, live), leases.PhaseDone)},
		"one that ended before its boundary does not":                {rec: rec("a", leases.StateReleased, 7, live)},
		"one already verified does not close it again":               {st: bloodravenv1alpha1.MysqlDatabaseStatus{LastVerifiedOperationID: "a"}, rec: ddl(rec("a", leases.StateReleased, 7, live))},
		"a gate already closed keeps its operation":                  {st: pending, rec: ddl(rec("a", leases.StateReleased, 7, live))},
		// Issue 35, item 4: verification covers one tenure.
		"the verified tenure does not close it again": {st: verifiedTenure("a", t0.Add(-time.Hour)), rec: tenureOf(ddl(rec("a", leases.StateReleased, 7, live)), t0.Add(-time.Hour))},
		// The status keeps microseconds; a record's clock may be finer.
		"the verified tenure, its record's time finer than the status's, does not close it again": {st: verifiedTenure("a", t0.Add(-time.Hour)),
			rec: tenureOf(ddl(rec("a", leases.StateReleased, 7, live)), t0.Add(-time.Hour+789*time.Nanosecond))},
		"a later tenure of the verified operation id closes it again": {st: verifiedTenure("a", t0.Add(-time.Hour)),
			rec: tenureOf(ddl(rec("a", leases.StateReleased, 7, live)), t0.Add(-time.Minute)), changed: true, wantEnded: "released"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			next, changed := CloseGate(tc.st, tc.rec, 3, t0)
			if changed != tc.changed {
				t.Fatalf("changed = %v, want %v", changed, tc.changed)
			}
			if !changed {
				return
			}
			p := next.PendingVerification
			if p == nil || p.OperationID != "a" || p.TopologyGeneration != 7 || p.Ended != tc.wantEnded || p.Reason != tc.rec.Reason || p.Announced {
				t.Fatalf("pendingVerification = %+v", p)
			}
			if !meta.IsStatusConditionTrue(next.Conditions, ConditionSchemaVerificationRequired) {
				t.Fatalf("conditions = %+v", next.Conditions)
			}
			if op, gen, ok := VerificationPending(&next); !ok || op != "a" || gen != 7 {
				t.Fatalf("VerificationPending = %s %d %v", op, gen, ok)
			}
			if tc.st.PendingVerification != nil {
				t.Fatal("the input status was edited")
			}
		})
	}
}

func revokedFor(r *leases.Record, reason string) *leases.Record { r.Reason = reason; return r }

// tenureOf is r with its tenure begun (and granted) at at.
func tenureOf(r *leases.Record, at time.Time) *leases.Record {
	r.HeldSince, r.GrantedAt = at, at
	return r
}

// verifiedTenure is a status whose gate a person opened for op's tenure
// begun at start.
func verifiedTenure(op string, start time.Time) bloodravenv1alpha1.MysqlDatabaseStatus {
	return bloodravenv1alpha1.MysqlDatabaseStatus{LastVerifiedOperationID: op, LastVerifiedTenureStart: microTime(start)}
}

// Issue 35, item 4: op X's runner dies past mark-ddl (gated), a person
// verifies X, X is re-run under the same id and dies past mark-ddl again:
// the gate closes again. At e3e472e the verification of X covered every
// later tenure of X, and a new operation ran over a half-applied change.
func TestVerificationCoversOneTenure(t *testing.T) {
	first := tenureOf(ddl(rec("x", leases.StateActive, 7, t0.Add(-time.Second))), t0.Add(-time.Hour))
	closed, changed := CloseGate(bloodravenv1alpha1.MysqlDatabaseStatus{}, first, 1, t0)
	if !changed || closed.PendingVerification.TenureStart == nil || !closed.PendingVerification.TenureStart.Time.Equal(t0.Add(-time.Hour)) {
		t.Fatalf("first tenure's gate: %+v", closed.PendingVerification)
	}
	v := OpenGate(closed, "x", true, 1, t0.Add(time.Minute))
	if !v.Opened || v.Status.LastVerifiedTenureStart == nil || !v.Status.LastVerifiedTenureStart.Time.Equal(t0.Add(-time.Hour)) {
		t.Fatalf("verified: %+v", v.Status)
	}
	if _, changed := CloseGate(v.Status, first, 1, t0.Add(2*time.Minute)); changed {
		t.Fatal("the verified tenure's record closed the gate again")
	}
	rerun := tenureOf(ddl(rec("x", leases.StateActive, 7, t0.Add(3*time.Minute))), t0.Add(2*time.Minute))
	again, changed := CloseGate(v.Status, rerun, 1, t0.Add(4*time.Minute))
	if !changed || again.PendingVerification.OperationID != "x" || !again.PendingVerification.TenureStart.Time.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("the re-run's gate: changed %v %+v", changed, again.PendingVerification)
	}
}

func TestOpenGate(t *testing.T) {
	closed, _ := CloseGate(bloodravenv1alpha1.MysqlDatabaseStatus{}, ddl(rec("a", leases.StateReleased, 7, t0)), 1, t0.Add(time.Second))
	tests := map[string]struct {
		st         bloodravenv1alpha1.MysqlDatabaseStatus
		annotation string
		present    bool
		opened     bool
		remove     bool
	}{
		"the pending operation's annotation opens the gate":         {st: closed, annotation: "a", present: true, opened: true, remove: true},
		"another operation's annotation is left alone":              {st: closed, annotation: "b", present: true},
		"an empty annotation is left alone":                         {st: closed, annotation: "", present: true},
		"no annotation, nothing":                                    {st: closed},
		"the last verified operation's annotation is removed":       {st: bloodravenv1alpha1.MysqlDatabaseStatus{LastVerifiedOperationID: "a"}, annotation: "a", present: true, remove: true},
		"an annotation on an open gate naming nothing is left":      {st: bloodravenv1alpha1.MysqlDatabaseStatus{LastVerifiedOperationID: "a"}, annotation: "b", present: true},
		"an annotation before any gate closed is left for its gate": {annotation: "a", present: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			v := OpenGate(tc.st, tc.annotation, tc.present, 2, t0.Add(time.Minute))
			if v.Opened != tc.opened || v.RemoveAnnotation != tc.remove {
				t.Fatalf("opened %v remove %v, want %v %v", v.Opened, v.RemoveAnnotation, tc.opened, tc.remove)
			}
			if !v.Opened {
				return
			}
			if v.Status.PendingVerification != nil || v.Status.LastVerifiedOperationID != "a" {
				t.Fatalf("status = %+v", v.Status)
			}
			c := meta.FindStatusCondition(v.Status.Conditions, ConditionSchemaVerificationRequired)
			if c == nil || c.Status != "False" || c.Reason != ReasonVerified {
				t.Fatalf("condition = %+v", c)
			}
			if tc.st.PendingVerification == nil {
				t.Fatal("the input status was edited")
			}
			// Verified, the same operation's ended record closes nothing.
			if _, changed := CloseGate(v.Status, ddl(rec("a", leases.StateReleased, 7, t0)), 2, t0.Add(time.Hour)); changed {
				t.Fatal("a verified operation closed the gate again")
			}
		})
	}
}
