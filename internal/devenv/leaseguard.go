package devenv

import (
	"context"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shipstream/bloodraven/leaseguard"
)

// The lease guard and the names it protects, as the chart names them for a
// release called bloodraven.
const (
	LeaseGuardName      = "bloodraven-lease-guard"
	LeaderElectionLease = "bloodraven-leader" // the operator's --leader-election-id default
	RecordKeySecret     = "bloodraven-lease-record-key"
)

// installLeaseGuard installs the lease guard (package leaseguard, the same
// policy the chart renders) over the whole cluster, for the operator's
// identity and its leader-election Lease, and waits until the API server
// enforces it: from then on only the operator writes deployment Leases, and
// it writes no other Lease.
func (p *Playground) installLeaseGuard(ctx context.Context, c client.Client) error {
	policy, binding := leaseguard.Policy(leaseguard.Options{
		Name:                    LeaseGuardName,
		OperatorUsername:        OperatorIdentity(),
		LeaderElectionNamespace: OperatorNamespace,
		LeaderElectionLease:     LeaderElectionLease,
	})
	for _, o := range []client.Object{policy, binding} {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("create lease guard %T: %w", o, err)
		}
	}
	// A dry-run create of a deployment Lease by the administrator: refused
	// once the policy is enforced, and never stored either way.
	probe := func(ctx context.Context) (bool, error) {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "bloodraven-lease-guard-probe", Namespace: OperatorNamespace}}
		err := c.Create(ctx, l, client.DryRunAll)
		if err != nil && !strings.Contains(err.Error(), leaseguard.MessageNotTheOperator) {
			return false, fmt.Errorf("lease guard probe: %w", err)
		}
		return err != nil, nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, probe); err != nil {
		return fmt.Errorf("the lease guard was not enforced: %w", err)
	}
	p.logf(">> lease guard %s enforced: deployment Leases are %s's alone", LeaseGuardName, OperatorIdentity())
	return nil
}
