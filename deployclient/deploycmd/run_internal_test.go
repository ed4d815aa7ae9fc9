package deploycmd

import (
	"testing"
	"time"
)

// SIGKILL comes --grace after the stop began, and never later than
// killSlack before either lease's confirmed deadline.
func TestTheKillComesBeforeTheEarliestDeadline(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name      string
		grace     time.Duration
		deadlines []time.Time
		want      time.Time
	}{
		{"grace fits before both deadlines", 2 * time.Second, []time.Time{now.Add(10 * time.Second), now.Add(9 * time.Second)}, now.Add(2 * time.Second)},
		{"the hold's deadline comes first", 5 * time.Second, []time.Time{now.Add(10 * time.Second), now.Add(3 * time.Second)}, now.Add(3*time.Second - killSlack)},
		{"a deadline already passed kills now or earlier", 5 * time.Second, []time.Time{now.Add(-time.Second), now.Add(10 * time.Second)}, now.Add(-time.Second - killSlack)},
		{"a lease never granted has no deadline", 2 * time.Second, []time.Time{now.Add(10 * time.Second), {}}, now.Add(2 * time.Second)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := killDeadline(now, tc.grace, tc.deadlines...); !got.Equal(tc.want) {
				t.Fatalf("killDeadline = %s, want %s", got.Sub(now), tc.want.Sub(now))
			}
		})
	}
}
