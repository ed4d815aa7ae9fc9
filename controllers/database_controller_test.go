package controllers

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

func TestDatabaseStatusSaysWhetherItsGroupExistsAndWhoMayDeploy(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	r := &DatabaseReconciler{Client: env.Client, API: env.Client, Clock: clocktesting.NewFakeClock(metav1.Now().Time)}
	db := &v1.MysqlDatabase{ObjectMeta: metav1.ObjectMeta{Name: "orders-app", Namespace: ns},
		Spec: v1.MysqlDatabaseSpec{GroupRef: v1.GroupReference{Name: "orders"}, DatabaseName: "orders"}}
	if err := env.Client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	check := func(group, clients metav1.ConditionStatus) {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(db)}); err != nil {
			t.Fatal(err)
		}
		got := &v1.MysqlDatabase{}
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

	g := &v1.MysqlFailoverGroup{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: ns},
		Spec: v1.MysqlFailoverGroupSpec{Sites: []v1.Site{{Name: "iad"}, {Name: "pdx"}}}}
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	if reqs := r.databasesOf(env.Client)(ctx, g); len(reqs) != 1 || reqs[0].Name != "orders-app" {
		t.Fatalf("a group change maps to %v, want its database", reqs)
	}
	patch := client.MergeFrom(db.DeepCopy())
	db.Spec.DeploymentClients = []v1.DeploymentClient{{Namespace: "application", ServiceAccount: "deploy"}}
	if err := env.Client.Patch(ctx, db, patch); err != nil {
		t.Fatal(err)
	}
	check(metav1.ConditionTrue, metav1.ConditionTrue)
}
