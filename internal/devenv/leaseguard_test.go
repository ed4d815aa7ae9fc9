package devenv

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shipstream/bloodraven/internal/testenv"
	"github.com/shipstream/bloodraven/leaseguard"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

// The playground's guard is enforced when installLeaseGuard returns, for
// the operator's identity: an administrator is refused a deployment Lease,
// the operator (impersonated, with the right to write any Lease) is not;
// and the record key's Role is accepted by the API server.
func TestThePlaygroundGuardsDeploymentLeases(t *testing.T) {
	ctx := context.Background()
	c := env.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OperatorNamespace}}); err != nil {
		t.Fatal(err)
	}
	writer := []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "lease-writer"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"*"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "lease-writer"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "lease-writer"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: OperatorServiceAccount, Namespace: OperatorNamespace}}},
	}
	for _, o := range append(writer, recordKeyRole()...) {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("create %T: %v", o, err)
		}
	}
	p := &Playground{}
	p.cfg.defaults()
	if err := p.installLeaseGuard(ctx, c); err != nil {
		t.Fatal(err)
	}
	lease := func() *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "bloodraven-migration-playground", Namespace: OperatorNamespace}}
	}
	if err := c.Create(ctx, lease(), client.DryRunAll); err == nil || !strings.Contains(err.Error(), leaseguard.MessageNotTheOperator) {
		t.Fatalf("an administrator's deployment Lease: %v, want the guard's refusal", err)
	}
	cfg := *env.Config
	cfg.Impersonate.UserName = OperatorIdentity()
	op, err := client.New(&cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	// (The authorizer learns of the binding above through its informers.)
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		err := op.Create(ctx, lease(), client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), "cannot create resource") {
			return false, nil
		}
		return true, err
	})
	if err != nil {
		t.Fatalf("the operator's deployment Lease: %v", err)
	}
	leader := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaderElectionLease, Namespace: OperatorNamespace}}
	if err := op.Create(ctx, leader, client.DryRunAll); err != nil {
		t.Fatalf("the operator's leader-election Lease: %v", err)
	}
}
