package webhook

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

func TestOnlyTheOperatorWritesDeployRunsThroughTheAPIServer(t *testing.T) {
	ctx := context.Background()
	admin, _ := env.User(t, "alice@example.com", "system:masters")
	operator, _ := env.User(t, operatorIdentity, "system:masters")
	collector, _ := env.User(t, "system:serviceaccount:kube-system:generic-garbage-collector", "system:masters")
	ns := env.Namespace(t)
	run := func() *bloodravenv1alpha1.DeployRun {
		return &bloodravenv1alpha1.DeployRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "playground-0123456789ab"},
			Spec: bloodravenv1alpha1.DeployRunSpec{GroupRef: bloodravenv1alpha1.GroupReference{Name: "playground"}, Instance: "counter-app",
				OperationID: "deploy-1", Caller: "system:serviceaccount:app:deploy", GrantGeneration: 3}}
	}
	refused := func(t *testing.T, err error, verb string) {
		t.Helper()
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "may not "+verb+" a DeployRun") ||
			!strings.Contains(err.Error(), "written by the operator only") {
			t.Fatalf("err = %v, want Invalid naming who may %s it", err, verb)
		}
	}

	if err := admin.Create(ctx, run()); err != nil {
		refused(t, err, "create")
	} else {
		t.Fatal("an administrator created a DeployRun")
	}
	r := run()
	if err := operator.Create(ctx, r); err != nil {
		t.Fatalf("the operator's create: %v", err)
	}
	r.Status = bloodravenv1alpha1.DeployRunStatus{Outcome: bloodravenv1alpha1.DeployRunRunning, Phase: "pre-ddl"}
	if err := operator.Status().Update(ctx, r); err != nil {
		t.Fatalf("the operator's status write: %v", err)
	}

	t.Run("a person's status edit is refused and changes nothing", func(t *testing.T) {
		err := admin.Status().Patch(ctx, r.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"status":{"outcome":"succeeded"}}`)))
		refused(t, err, "change")
		err = admin.Patch(ctx, r.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"instance":"other"}}`)))
		refused(t, err, "change")
		got := &bloodravenv1alpha1.DeployRun{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(r), got); err != nil {
			t.Fatal(err)
		}
		if got.Status.Outcome != bloodravenv1alpha1.DeployRunRunning || got.Spec.Instance != "counter-app" {
			t.Fatalf("the run changed: %+v", got)
		}
	})
	t.Run("a person's delete is refused", func(t *testing.T) {
		refused(t, admin.Delete(ctx, r.DeepCopy()), "delete")
		if err := admin.Get(ctx, client.ObjectKeyFromObject(r), &bloodravenv1alpha1.DeployRun{}); err != nil {
			t.Fatalf("the run is gone: %v", err)
		}
	})
	t.Run("the garbage collector may orphan and delete, not write status", func(t *testing.T) {
		err := collector.Status().Patch(ctx, r.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"status":{"outcome":"succeeded"}}`)))
		refused(t, err, "change")
		if err := collector.Patch(ctx, r.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"ownerReferences":null}}`))); err != nil {
			t.Fatalf("the garbage collector's orphaning: %v", err)
		}
		if err := collector.Delete(ctx, r.DeepCopy()); err != nil {
			t.Fatalf("the garbage collector's delete: %v", err)
		}
	})
	t.Run("the operator may delete", func(t *testing.T) {
		r2 := run()
		r2.Name = "playground-ba9876543210"
		if err := operator.Create(ctx, r2); err != nil {
			t.Fatal(err)
		}
		if err := operator.Delete(ctx, r2); err != nil {
			t.Fatalf("the operator's delete: %v", err)
		}
	})
}

func TestValidateRunWriter(t *testing.T) {
	tests := map[string]struct {
		op, sub, user string
		allowed       bool
	}{
		"the operator creates":                       {op: "CREATE", user: operatorIdentity, allowed: true},
		"the operator deletes":                       {op: "DELETE", user: operatorIdentity, allowed: true},
		"a person may not create":                    {op: "CREATE", user: "alice"},
		"a person may not delete":                    {op: "DELETE", user: "alice"},
		"the namespace controller deletes":           {op: "DELETE", user: "system:serviceaccount:kube-system:namespace-controller", allowed: true},
		"kube-controller-manager deletes":            {op: "DELETE", user: "system:kube-controller-manager", allowed: true},
		"the garbage collector may not write status": {op: "UPDATE", sub: "status", user: "system:serviceaccount:kube-system:generic-garbage-collector"},
		"the garbage collector orphans":              {op: "UPDATE", user: "system:serviceaccount:kube-system:generic-garbage-collector", allowed: true},
		"the garbage collector may not create":       {op: "CREATE", user: "system:serviceaccount:kube-system:generic-garbage-collector"},
		"a pipeline's service account may not write": {op: "UPDATE", user: "system:serviceaccount:app:deploy"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if errs := ValidateRunWriter(tc.op, tc.sub, tc.user, operatorIdentity); (len(errs) == 0) != tc.allowed {
				t.Fatalf("errs = %v, want allowed %v", errs, tc.allowed)
			}
		})
	}
	if errs := ValidateRunWriter("CREATE", "", "", ""); len(errs) == 0 {
		t.Fatal("without an operator identity configured, an anonymous user may create")
	}
}

func TestOnlyTheOperatorWritesADatabasesStatusThroughTheAPIServer(t *testing.T) {
	ctx := context.Background()
	admin, _ := env.User(t, "alice@example.com", "system:masters")
	operator, _ := env.User(t, operatorIdentity, "system:masters")
	ns := env.Namespace(t)
	db := &bloodravenv1alpha1.MysqlDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "counter-app"},
		Spec: bloodravenv1alpha1.MysqlDatabaseSpec{GroupRef: bloodravenv1alpha1.GroupReference{Name: "playground"}, DatabaseName: "counter"}}
	if err := admin.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	// The operator closes the gate.
	db.Status.PendingVerification = &bloodravenv1alpha1.SchemaVerification{OperationID: "op-1", TopologyGeneration: 1, Ended: "revoked", Since: metav1.Now()}
	if err := operator.Status().Update(ctx, db); err != nil {
		t.Fatalf("the operator's status write: %v", err)
	}
	// A person clearing it by hand is refused, and told what to do.
	err := admin.Status().Patch(ctx, db.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"status":{"pendingVerification":null}}`)))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), bloodravenv1alpha1.SchemaVerifiedAnnotation+"=<operationId>") {
		t.Fatalf("err = %v, want Invalid naming the annotation", err)
	}
	got := &bloodravenv1alpha1.MysqlDatabase{}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(db), got); err != nil || got.Status.PendingVerification == nil {
		t.Fatalf("the gate changed: %+v %v", got.Status, err)
	}
	// A write that changes nothing is allowed for everyone.
	if err := admin.Status().Update(ctx, got); err != nil {
		t.Fatalf("a no-op status write: %v", err)
	}
}
