package operator

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/clock"

	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/topology"
)

// LeaderSkewMargin is taken off the leadership a LeaderCheck confirms: the
// clocks of two replicas may differ by this much.
const LeaderSkewMargin = 2 * time.Second

// leaderReadTimeout bounds the check's read of the Lease: a replica that
// cannot read it within this long does not act on the data plane.
const leaderReadTimeout = 2 * time.Second

// LeaderCheck confirms, from a fresh read (never a cache) of the
// leader-election Lease name through leases, that identity still holds it
// and that its last renewal is recent enough (policy.Leading), on clk.
func LeaderCheck(leases coordinationv1client.LeaseInterface, name, identity string, clk clock.PassiveClock) topology.LeaderCheck {
	return func(ctx context.Context) (time.Duration, error) {
		rctx, cancel := context.WithTimeout(ctx, leaderReadTimeout)
		defer cancel()
		l, err := leases.Get(rctx, name, metav1.GetOptions{})
		if err != nil {
			return 0, fmt.Errorf("read the leader-election Lease %s: %w", name, err)
		}
		v := policy.LeaderLeaseView{}
		if h := l.Spec.HolderIdentity; h != nil {
			v.Holder = *h
		}
		if t := l.Spec.RenewTime; t != nil {
			v.RenewTime = t.Time
		}
		if d := l.Spec.LeaseDurationSeconds; d != nil {
			v.LeaseDuration = time.Duration(*d) * time.Second
		}
		return policy.Leading(v, identity, clk.Now(), LeaderSkewMargin)
	}
}
