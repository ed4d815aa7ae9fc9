package policy

import (
	"testing"
	"time"
)

func TestLeading(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		lease LeaderLeaseView
		left  time.Duration
		ok    bool
	}{
		"held and renewed a second ago":  {LeaderLeaseView{Holder: "me", RenewTime: now.Add(-time.Second), LeaseDuration: 15 * time.Second}, 12 * time.Second, true},
		"held by another replica":        {LeaderLeaseView{Holder: "them", RenewTime: now, LeaseDuration: 15 * time.Second}, 0, false},
		"held, but not renewed in time":  {LeaderLeaseView{Holder: "me", RenewTime: now.Add(-14 * time.Second), LeaseDuration: 15 * time.Second}, 0, false},
		"held, renewal expired long ago": {LeaderLeaseView{Holder: "me", RenewTime: now.Add(-time.Hour), LeaseDuration: 15 * time.Second}, 0, false},
		"no holder":                      {LeaderLeaseView{RenewTime: now, LeaseDuration: 15 * time.Second}, 0, false},
	} {
		left, err := Leading(tc.lease, "me", now, 2*time.Second)
		if (err == nil) != tc.ok || left != tc.left {
			t.Errorf("%s: left %v err %v, want %v ok %v", name, left, err, tc.left, tc.ok)
		}
	}
}
