package topology

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrNotLeading is returned by a data-plane action that opens a site or
// points one at a primary when the operator could not confirm, right
// before it, that it still leads: a deposed leader (paused past its leader
// lease, partitioned from the API server) never acts on the data plane.
var ErrNotLeading = errors.New("this replica could not confirm it still leads: no site opened or re-pointed")

// LeaderCheck confirms that this replica still leads, from a fresh read of
// its leader-election Lease, and returns how long its leadership stands
// for certain (until the Lease could be taken by another replica).
type LeaderCheck func(ctx context.Context) (time.Duration, error)

type leaderKey struct{}

// WithLeaderCheck returns a context whose data-plane actions confirm
// leadership with check first (ConfirmLeading). A nil check changes
// nothing: tests and the simulated driver without one act unchecked.
func WithLeaderCheck(ctx context.Context, check LeaderCheck) context.Context {
	if check == nil {
		return ctx
	}
	return context.WithValue(ctx, leaderKey{}, check)
}

// ConfirmLeading runs ctx's LeaderCheck, if any, right before an action
// that opens a site or re-points one. It returns a context bounded by the
// leadership that was confirmed: statements sent after it may have been
// taken over fail instead of running. Without a check it returns ctx.
func ConfirmLeading(ctx context.Context) (context.Context, context.CancelFunc, error) {
	check, _ := ctx.Value(leaderKey{}).(LeaderCheck)
	if check == nil {
		return ctx, func() {}, nil
	}
	left, err := check(ctx)
	if err != nil {
		return ctx, func() {}, fmt.Errorf("%w: %w", ErrNotLeading, err)
	}
	if left <= 0 {
		return ctx, func() {}, ErrNotLeading
	}
	c, cancel := context.WithTimeout(ctx, left)
	return c, cancel, nil
}
