package leaseguard_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shipstream/bloodraven/internal/scene"
	"github.com/shipstream/bloodraven/internal/testenv"
	"github.com/shipstream/bloodraven/leaseguard"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/store/leasestore"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

// The guard recognizes the names and the label the operator writes.
func TestTheGuardKnowsTheOperatorsLeases(t *testing.T) {
	for _, name := range []string{leases.MigrationName("orders"), leases.HoldName("orders", "op-1"), leases.TombstoneName("orders", "op-1"),
		leases.MigrationName(strings.Repeat("g", 300))} {
		if !strings.HasPrefix(name, leaseguard.NamePrefix) {
			t.Errorf("the operator names a deployment Lease %q, without the prefix %q the guard protects", name, leaseguard.NamePrefix)
		}
	}
	if leaseguard.Label != leasestore.LabelDeployLease {
		t.Errorf("the guard protects the label %q, the operator writes %q", leaseguard.Label, leasestore.LabelDeployLease)
	}
}

func TestBoundNamespaces(t *testing.T) {
	tests := map[string]struct {
		namespaces []string
		want       []string
	}{
		"cluster-wide":                      {nil, nil},
		"sorted, with the leader election":  {[]string{"team-b", "team-a"}, []string{"ops", "team-a", "team-b"}},
		"each once":                         {[]string{"team-a", "ops", "team-a"}, []string{"ops", "team-a"}},
		"the leader-election namespace too": {[]string{"ops"}, []string{"ops"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			opts := leaseguard.Options{Name: "g", OperatorUsername: "system:serviceaccount:ops:bloodraven",
				LeaderElectionNamespace: "ops", LeaderElectionLease: "bloodraven-leader", Namespaces: tc.namespaces}
			if got := leaseguard.BoundNamespaces(opts); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("BoundNamespaces = %v, want %v", got, tc.want)
			}
			_, binding := leaseguard.Policy(opts)
			if (binding.Spec.MatchResources == nil) != (tc.want == nil) {
				t.Fatalf("matchResources %+v for namespaces %v", binding.Spec.MatchResources, tc.namespaces)
			}
		})
	}
}

// Who is who in the API server tests.
const (
	operatorSA = "bloodraven"
	gcUser     = "system:serviceaccount:kube-system:generic-garbage-collector"
	nsCtlUser  = "system:serviceaccount:kube-system:namespace-controller"
	kcmUser    = "system:kube-controller-manager"
)

// actors are the clients of one test: admin (system:masters), app (a
// ServiceAccount allowed every Lease verb in the app namespaces, through its
// own token), operator (the operator's ServiceAccount, every Lease verb
// cluster-wide, through its own token) and the cleanup user names
// (impersonated, every Lease verb cluster-wide).
type actors struct {
	clients       map[string]client.Client
	operatorNS    string
	appNS, otherN string // the app may write Leases in both
}

func setupActors(t *testing.T, ctx context.Context) *actors {
	t.Helper()
	a := &actors{clients: map[string]client.Client{"admin": env.Client},
		operatorNS: env.Namespace(t), appNS: env.Namespace(t), otherN: env.Namespace(t)}
	writer := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{GenerateName: "lease-writer-"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"*"}}}}
	create(t, ctx, writer)
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: writer.Name}
	create(t, ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{GenerateName: "lease-writer-"}, RoleRef: ref,
		Subjects: []rbacv1.Subject{
			{Kind: rbacv1.ServiceAccountKind, Name: operatorSA, Namespace: a.operatorNS},
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: gcUser},
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: nsCtlUser},
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: kcmUser},
		}})
	for _, ns := range []string{a.appNS, a.otherN} {
		create(t, ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "app-leases", Namespace: ns}, RoleRef: ref,
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "app", Namespace: a.appNS}}})
	}
	a.clients["app"] = tokenClient(t, ctx, a.appNS, "app")
	a.clients["operator"] = tokenClient(t, ctx, a.operatorNS, operatorSA)
	for name, user := range map[string]string{"gc": gcUser, "namespace-controller": nsCtlUser, "kube-controller-manager": kcmUser} {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		a.clients[name] = newClient(t, cfg)
	}
	return a
}

func (a *actors) operatorUsername() string {
	return "system:serviceaccount:" + a.operatorNS + ":" + operatorSA
}

// namespace resolves a case's namespace: "app", "other", "operator" (the
// leader-election namespace) or a literal name.
func (a *actors) namespace(ns string) string {
	switch ns {
	case "app":
		return a.appNS
	case "other":
		return a.otherN
	case "operator":
		return a.operatorNS
	}
	return ns
}

func create(t *testing.T, ctx context.Context, o client.Object) {
	t.Helper()
	if err := env.Client.Create(ctx, o); err != nil {
		t.Fatalf("create %T %s: %v", o, o.GetName(), err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
}

func newClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tokenClient authenticates as the ServiceAccount ns/name with a token of
// its own (TokenRequest), as a pod would.
func tokenClient(t *testing.T, ctx context.Context, ns, name string) client.Client {
	t.Helper()
	token, err := scene.Token(ctx, env.Kube, ns, name, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = token
	return newClient(t, cfg)
}

// install creates the guard and waits until the API server enforces it; it
// is removed, and its removal awaited, when the test ends.
func install(t *testing.T, ctx context.Context, opts leaseguard.Options, probeNS string) {
	t.Helper()
	policy, binding := leaseguard.Policy(opts)
	for _, o := range []client.Object{policy, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("create %s %s: %v", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
		}
	}
	t.Cleanup(func() {
		for _, o := range []client.Object{binding, policy} {
			_ = env.Client.Delete(context.Background(), o)
		}
		waitEnforced(t, probeNS, false)
	})
	// (The policy's status.typeChecking is written by
	// kube-controller-manager, which testenv does not run: the expressions
	// compile, or the API server would have refused the policy, and the
	// tables below exercise every one of them.)
	waitEnforced(t, probeNS, true)
}

// waitEnforced waits until an administrator's (dry-run) create of a
// deployment Lease in ns is refused by the guard (enforced) or admitted.
func waitEnforced(t *testing.T, ns string, enforced bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		probe := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "bloodraven-lease-guard-probe", Namespace: ns}}
		err := env.Client.Create(context.Background(), probe, client.DryRunAll)
		refused := err != nil && strings.Contains(err.Error(), leaseguard.MessageNotTheOperator)
		if err != nil && !refused {
			t.Fatalf("probe: %v", err)
		}
		if refused == enforced {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease guard never became enforced=%v", enforced)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// leaseCase is one request: user does verb on the Lease ns/name. For
// update, delete and deletecollection, existing creates the Lease first
// (with existingLabels) as that user; an update sets labels (when not nil)
// and the holder. deny is the guard's message the request must be refused
// with, or "" when it must be admitted.
type leaseCase struct {
	user, verb, ns, name string
	generateName         bool
	labels               map[string]string
	existing             string
	existingLabels       map[string]string
	deny                 string
}

var deploymentLabel = map[string]string{leaseguard.Label: "true"}

func run(t *testing.T, ctx context.Context, a *actors, tests map[string]leaseCase) {
	t.Helper()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ns := a.namespace(tc.ns)
			c := a.clients[tc.user]
			if c == nil {
				t.Fatalf("no user %q", tc.user)
			}
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: ns, Labels: tc.existingLabels}}
			if tc.existing != "" {
				if err := a.clients[tc.existing].Create(ctx, l); err != nil {
					t.Fatalf("the existing Lease, as %s: %v", tc.existing, err)
				}
			}
			var err error
			switch tc.verb {
			case "create":
				l.Labels = tc.labels
				if tc.generateName {
					l.Name, l.GenerateName = "", tc.name
				}
				err = c.Create(ctx, l)
			case "update":
				if tc.labels != nil {
					l.Labels = tc.labels
				}
				l.Spec.HolderIdentity = ptr.To("someone")
				err = c.Update(ctx, l)
			case "delete":
				err = c.Delete(ctx, l)
			case "deletecollection":
				err = c.DeleteAllOf(ctx, &coordinationv1.Lease{}, client.InNamespace(ns), client.MatchingFields{"metadata.name": tc.name})
			default:
				t.Fatalf("verb %q", tc.verb)
			}
			switch {
			case tc.deny == "" && err != nil:
				t.Fatalf("%s %s %s/%s refused: %v", tc.user, tc.verb, ns, tc.name, err)
			case tc.deny != "" && err == nil:
				t.Fatalf("%s %s %s/%s admitted, want refused: %s", tc.user, tc.verb, ns, tc.name, tc.deny)
			case tc.deny != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") || !strings.Contains(err.Error(), tc.deny)):
				t.Fatalf("%s %s %s/%s refused with %v, want the guard's 403: %s", tc.user, tc.verb, ns, tc.name, err, tc.deny)
			}
		})
	}
}

// The whole-cluster guard, through the real API server's admission: the
// users' RBAC allows every request below; the guard alone refuses.
func TestTheGuardRefusesEveryoneButTheOperator(t *testing.T) {
	ctx := context.Background()
	a := setupActors(t, ctx)
	install(t, ctx, leaseguard.Options{Name: "lease-guard-cluster", OperatorUsername: a.operatorUsername(),
		LeaderElectionNamespace: a.operatorNS, LeaderElectionLease: "bloodraven-leader"}, a.appNS)

	const notOperator, confined = leaseguard.MessageNotTheOperator, leaseguard.MessageOperatorConfined
	run(t, ctx, a, map[string]leaseCase{
		// Another application, allowed every Lease verb in its namespace.
		"app cannot create a migration mutex":                {user: "app", verb: "create", ns: "app", name: "bloodraven-migration-x", deny: notOperator},
		"app cannot create one by generateName":              {user: "app", verb: "create", ns: "app", name: "bloodraven-", generateName: true, deny: notOperator},
		"app cannot create a labelled Lease of another name": {user: "app", verb: "create", ns: "app", name: "forged-hold", labels: deploymentLabel, deny: notOperator},
		"app cannot update a migration mutex": {user: "app", verb: "update", ns: "app", name: "bloodraven-migration-update",
			existing: "operator", existingLabels: deploymentLabel, deny: notOperator},
		"app cannot delete a migration mutex": {user: "app", verb: "delete", ns: "app", name: "bloodraven-migration-delete",
			existing: "operator", existingLabels: deploymentLabel, deny: notOperator},
		"app cannot delete a tombstone with a collection delete": {user: "app", verb: "deletecollection", ns: "app", name: "bloodraven-tombstone-collection",
			existing: "operator", existingLabels: deploymentLabel, deny: notOperator},
		"app cannot remove the label of a deployment Lease": {user: "app", verb: "update", ns: "app", name: "bloodraven-hold-unlabel",
			existing: "operator", existingLabels: deploymentLabel, labels: map[string]string{}, deny: notOperator},
		"app cannot label its own Lease": {user: "app", verb: "update", ns: "app", name: "my-app-labelled-later",
			existing: "app", labels: deploymentLabel, deny: notOperator},
		"app creates its own leader-election Lease": {user: "app", verb: "create", ns: "app", name: "my-app-leader"},
		"app updates its own leader-election Lease": {user: "app", verb: "update", ns: "app", name: "my-app-leader-update", existing: "app"},
		"app deletes its own leader-election Lease": {user: "app", verb: "delete", ns: "app", name: "my-app-leader-delete", existing: "app"},
		// Cluster administrators are refused like everybody else.
		"admin cannot create a hold": {user: "admin", verb: "create", ns: "app", name: "bloodraven-hold-admin", labels: deploymentLabel, deny: notOperator},
		"admin cannot delete a tombstone": {user: "admin", verb: "delete", ns: "app", name: "bloodraven-tombstone-admin",
			existing: "operator", existingLabels: deploymentLabel, deny: notOperator},
		// The operator: its deployment Leases anywhere, its leader-election
		// Lease, nothing else.
		"operator creates a migration mutex": {user: "operator", verb: "create", ns: "app", name: "bloodraven-migration-op", labels: deploymentLabel},
		"operator updates a hold": {user: "operator", verb: "update", ns: "other", name: "bloodraven-hold-op",
			existing: "operator", existingLabels: deploymentLabel},
		"operator deletes a tombstone": {user: "operator", verb: "delete", ns: "app", name: "bloodraven-tombstone-op",
			existing: "operator", existingLabels: deploymentLabel},
		"operator updates its leader-election Lease": {user: "operator", verb: "update", ns: "operator", name: "bloodraven-leader", existing: "operator"},
		"operator cannot create a node heartbeat":    {user: "operator", verb: "create", ns: "kube-node-lease", name: "node-created-" + a.appNS, deny: confined},
		"operator cannot update a node heartbeat": {user: "operator", verb: "update", ns: "kube-node-lease", name: "node-updated-" + a.appNS,
			existing: "admin", deny: confined},
		"operator cannot delete a node heartbeat": {user: "operator", verb: "delete", ns: "kube-node-lease", name: "node-deleted-" + a.appNS,
			existing: "admin", deny: confined},
		"operator cannot create another component's leader-election Lease": {user: "operator", verb: "create", ns: "app", name: "other-leader", deny: confined},
		"operator cannot update another component's leader-election Lease": {user: "operator", verb: "update", ns: "app", name: "other-leader-update",
			existing: "app", deny: confined},
		"operator cannot take over a Lease by labelling it": {user: "operator", verb: "update", ns: "app", name: "other-leader-labelled",
			existing: "app", labels: deploymentLabel, deny: confined},
		"operator cannot create a labelled Lease without the prefix": {user: "operator", verb: "create", ns: "app", name: "kube-scheduler",
			labels: deploymentLabel, deny: confined},
		// The garbage collector and the namespace controller delete, and
		// nothing else.
		"the garbage collector deletes a migration mutex": {user: "gc", verb: "delete", ns: "app", name: "bloodraven-migration-gc",
			existing: "operator", existingLabels: deploymentLabel},
		"the namespace controller deletes a hold": {user: "namespace-controller", verb: "delete", ns: "app", name: "bloodraven-hold-nsctl",
			existing: "operator", existingLabels: deploymentLabel},
		"kube-controller-manager deletes a tombstone": {user: "kube-controller-manager", verb: "delete", ns: "app", name: "bloodraven-tombstone-kcm",
			existing: "operator", existingLabels: deploymentLabel},
		"the garbage collector cannot create a deployment Lease": {user: "gc", verb: "create", ns: "app", name: "bloodraven-hold-gc",
			labels: deploymentLabel, deny: notOperator},
		"the garbage collector cannot update a deployment Lease": {user: "gc", verb: "update", ns: "app", name: "bloodraven-hold-gc-update",
			existing: "operator", existingLabels: deploymentLabel, deny: notOperator},
	})
}

// A namespaced guard covers its namespaces and the leader-election
// namespace, nothing else; the leader-election Lease is the operator's by
// namespace and name, whatever its name.
func TestANamespacedGuardCoversItsNamespacesAndTheLeaderElections(t *testing.T) {
	ctx := context.Background()
	a := setupActors(t, ctx)
	install(t, ctx, leaseguard.Options{Name: "lease-guard-namespaced", OperatorUsername: a.operatorUsername(),
		LeaderElectionNamespace: a.operatorNS, LeaderElectionLease: "ops-leader", Namespaces: []string{a.appNS}}, a.appNS)

	const notOperator, confined = leaseguard.MessageNotTheOperator, leaseguard.MessageOperatorConfined
	run(t, ctx, a, map[string]leaseCase{
		"app cannot create a migration mutex in a bound namespace": {user: "app", verb: "create", ns: "app", name: "bloodraven-migration-x", deny: notOperator},
		"another release's namespace is not guarded":               {user: "app", verb: "create", ns: "other", name: "bloodraven-migration-x"},
		"operator creates a migration mutex":                       {user: "operator", verb: "create", ns: "app", name: "bloodraven-migration-y", labels: deploymentLabel},
		"operator updates its leader-election Lease": {user: "operator", verb: "update", ns: "operator", name: "ops-leader",
			existing: "operator"},
		"operator cannot write another Lease in its own namespace": {user: "operator", verb: "create", ns: "operator", name: "other-leader", deny: confined},
		"operator cannot write a Lease of that name elsewhere":     {user: "operator", verb: "create", ns: "app", name: "ops-leader", deny: confined},
	})
}
