package controllers

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/scene"
	"github.com/shipstream/bloodraven/internal/testenv"
)

func TestDatabaseStatusSaysWhetherItsGroupExistsAndWhoMayDeploy(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	r := &DatabaseReconciler{Client: env.Client, Clock: clocktesting.NewFakeClock(metav1.Now().Time)}
	db := &bloodravenv1alpha1.MysqlDatabase{ObjectMeta: metav1.ObjectMeta{Name: "orders-app", Namespace: ns},
		Spec: bloodravenv1alpha1.MysqlDatabaseSpec{GroupRef: bloodravenv1alpha1.GroupReference{Name: "orders"}, DatabaseName: "orders"}}
	if err := env.Client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	check := func(group, clients metav1.ConditionStatus) {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)}); err != nil {
			t.Fatal(err)
		}
		got := &bloodravenv1alpha1.MysqlDatabase{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(db), got); err != nil {
			t.Fatal(err)
		}
		for typ, want := range map[string]metav1.ConditionStatus{DatabaseGroupFound: group, DatabaseDeploymentClients: clients} {
			if c := meta.FindStatusCondition(got.Status.Conditions, typ); c == nil || c.Status != want {
				t.Fatalf("%s = %+v, want %s", typ, c, want)
			}
		}
		if got.Status.ObservedGeneration != got.Generation {
			t.Fatalf("observedGeneration %d, generation %d", got.Status.ObservedGeneration, got.Generation)
		}
	}
	check(metav1.ConditionFalse, metav1.ConditionFalse)

	g := &bloodravenv1alpha1.MysqlFailoverGroup{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: ns},
		Spec: bloodravenv1alpha1.MysqlFailoverGroupSpec{Sites: []bloodravenv1alpha1.Site{{Name: "iad"}, {Name: "pdx"}}}}
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	if reqs := r.databasesOf(env.Client)(ctx, g); len(reqs) != 1 || reqs[0].Name != "orders-app" {
		t.Fatalf("a group change maps to %v, want its database", reqs)
	}
	patch := client.MergeFrom(db.DeepCopy())
	db.Spec.DeploymentClients = []bloodravenv1alpha1.DeploymentClient{{Namespace: "application", ServiceAccount: "deploy"}}
	if err := env.Client.Patch(ctx, db, patch); err != nil {
		t.Fatal(err)
	}
	check(metav1.ConditionTrue, metav1.ConditionTrue)
}

// countingClient counts the database controller's reconciles: each reads
// its database once.
type countingClient struct {
	client.Client
	reconciles atomic.Int64
}

func (c *countingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*bloodravenv1alpha1.MysqlDatabase); ok {
		c.reconciles.Add(1)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// A failing-over fleet writes each group's status several times. Those
// writes cost the database controller nothing: a database's status depends
// only on its group's existence, so only a group's creation and deletion
// reach it. Before the fix every status write of a group queued each of
// its databases again, for two uncached GETs then (at 5,000 groups and
// 10,000 databases, a site loss paid for it in its last promotion).
func TestAGroupsStatusWritesCostTheDatabaseControllerNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := env.Namespace(t)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingClient{Client: mgr.GetClient()}
	r := &DatabaseReconciler{Client: counted, Clock: clock.RealClock{}}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() { cancel(); <-done }()

	g := scene.Group(ns, "orders")
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"orders-app", "orders-reports"} {
		if err := env.Client.Create(ctx, scene.Database(ns, name, "orders")); err != nil {
			t.Fatal(err)
		}
	}
	groupFound := func(want metav1.ConditionStatus) bool {
		for _, name := range []string{"orders-app", "orders-reports"} {
			db := &bloodravenv1alpha1.MysqlDatabase{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, db); err != nil {
				t.Fatal(err)
			}
			if c := meta.FindStatusCondition(db.Status.Conditions, DatabaseGroupFound); c == nil || c.Status != want {
				return false
			}
		}
		return true
	}
	testenv.WaitFor(t, 30*time.Second, func() bool { return groupFound(metav1.ConditionTrue) })
	// The creations' last reconciles (each database's own status write
	// comes back once) are over when the count stands still.
	testenv.WaitFor(t, 10*time.Second, func() bool {
		n := counted.reconciles.Load()
		time.Sleep(500 * time.Millisecond)
		return counted.reconciles.Load() == n
	})
	before := counted.reconciles.Load()

	for i := range 20 {
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
				return err
			}
			g.Status.TopologyGeneration = int64(i + 1)
			return env.Client.Status().Update(ctx, g)
		}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second)
	if n := counted.reconciles.Load() - before; n != 0 {
		t.Errorf("20 status writes of the group cost the database controller %d reconciles, want 0", n)
	}

	// Its existence still reaches the databases.
	if err := env.Client.Delete(ctx, g); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, func() bool { return groupFound(metav1.ConditionFalse) })
}
