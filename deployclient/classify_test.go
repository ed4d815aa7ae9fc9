package deployclient

import (
	"errors"
	"testing"
	"time"
)

func TestClassifyAnswersAgainstTheDeadlineAndTheGeneration(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	j := judged{lossAt: t0.Add(10 * time.Second), deadline: t0.Add(12 * time.Second), generation: 4}
	ok := &Lease{TopologyGeneration: 4, TTLSeconds: 30}
	cases := []struct {
		name      string
		r         renewal
		want      verdict
		cause     Cause
		wantUntil time.Time
	}{
		{"a 200 before the loss moment confirms from its sending", renewal{sent: t0.Add(time.Second), answered: t0.Add(2 * time.Second), lease: ok}, confirmed, "", t0.Add(31 * time.Second)},
		{"a 200 that arrives at the loss moment is a loss", renewal{sent: t0.Add(9 * time.Second), answered: t0.Add(10 * time.Second), lease: ok}, terminal, CauseDeadlinePassed, time.Time{}},
		{"a 200 at another generation is a loss", renewal{sent: t0, answered: t0, lease: &Lease{TopologyGeneration: 5, TTLSeconds: 30}}, terminal, CauseGenerationChanged, time.Time{}},
		{"423 before the loss moment is transient", renewal{sent: t0, answered: t0, err: &APIError{Status: 423, Code: CodeUnstable}}, transient, "", time.Time{}},
		{"423 after the loss moment is a loss", renewal{sent: t0, answered: t0.Add(11 * time.Second), err: &APIError{Status: 423, Code: CodeUnstable}}, terminal, CauseDeadlinePassed, time.Time{}},
		{"a transport error is transient", renewal{sent: t0, answered: t0, err: errors.New("connection reset")}, transient, "", time.Time{}},
		{"503 not_leader is transient", renewal{sent: t0, answered: t0, err: &APIError{Status: 503, Code: CodeNotLeader}}, transient, "", time.Time{}},
		{"409 revoked ends it even before the loss moment", renewal{sent: t0, answered: t0, err: &APIError{Status: 409, Code: CodeRevoked, Reason: "topology_changed"}}, terminal, CauseRevoked, time.Time{}},
		{"403 token_mismatch ends it", renewal{sent: t0, answered: t0, err: &APIError{Status: 403, Code: CodeTokenMismatch}}, terminal, CauseTokenMismatch, time.Time{}},
		{"404 ends it", renewal{sent: t0, answered: t0, err: &APIError{Status: 404, Code: CodeNotFound}}, terminal, CauseExpired, time.Time{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.r.kind = KindMigration
			c := classify(tc.r, j)
			if c.verdict != tc.want {
				t.Fatalf("verdict %s, want %s", c.verdict, tc.want)
			}
			if tc.want == terminal && (c.lost == nil || c.lost.Cause != tc.cause || c.lost.GrantGeneration != 4) {
				t.Fatalf("loss %+v, want cause %s at grant generation 4", c.lost, tc.cause)
			}
			if tc.want == confirmed && !c.deadline.Equal(tc.wantUntil) {
				t.Fatalf("deadline %s, want %s (sent + the answered ttl, never the server's expiresAt)", c.deadline, tc.wantUntil)
			}
		})
	}
}
