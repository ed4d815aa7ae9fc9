package operator

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// LeaderCheck reads the leader-election Lease from the real API server and
// confirms only a current holder (issue 35, item 6).
func TestLeaderCheckConfirmsOnlyTheCurrentHolder(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	clk := clocktesting.NewFakeClock(now)
	leases := env.Kube.CoordinationV1().Leases(ns)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "bloodraven-leader", Namespace: ns},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("me"), LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime: &metav1.MicroTime{Time: now.Add(-time.Second)}}}
	if _, err := leases.Create(ctx, l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if left, err := LeaderCheck(leases, "bloodraven-leader", "me", clk)(ctx); err != nil || left != 12*time.Second {
		t.Fatalf("the holder, renewed a second ago: %v %v, want 12s", left, err)
	}
	if _, err := LeaderCheck(leases, "bloodraven-leader", "someone-else", clk)(ctx); err == nil {
		t.Fatal("a replica that does not hold the Lease was confirmed")
	}
	clk.Step(20 * time.Second) // paused past its lease
	if _, err := LeaderCheck(leases, "bloodraven-leader", "me", clk)(ctx); err == nil {
		t.Fatal("a holder whose renewal is older than the lease was confirmed")
	}
	if _, err := LeaderCheck(leases, "missing", "me", clk)(ctx); err == nil {
		t.Fatal("no Lease confirmed leadership")
	}
}
