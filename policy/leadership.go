package policy

import (
	"fmt"
	"time"
)

// LeaderLeaseView is what the leadership check reads of the leader-election
// Lease, fresh from the API server.
type LeaderLeaseView struct {
	Holder        string
	RenewTime     time.Time
	LeaseDuration time.Duration
}

// Leading decides whether identity still leads at now (docs/failover.md "a
// deposed leader never acts on the data plane"): it holds the Lease and
// the Lease's last renewal is within its duration. left is how long that
// stays certain: no other replica may take the Lease before RenewTime +
// LeaseDuration (client-go's leader election waits a full duration after
// the last renewal it observed), less margin for clock skew between
// replicas.
func Leading(l LeaderLeaseView, identity string, now time.Time, margin time.Duration) (left time.Duration, err error) {
	if identity == "" || l.Holder != identity {
		return 0, fmt.Errorf("the leader-election Lease is held by %q", l.Holder)
	}
	left = l.RenewTime.Add(l.LeaseDuration).Sub(now) - margin
	if left <= 0 {
		return 0, fmt.Errorf("the leader-election Lease was last renewed at %s, more than %s ago", l.RenewTime.UTC().Format(time.RFC3339Nano), l.LeaseDuration-margin)
	}
	return left, nil
}
