package controllers

import (
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/policy"
)

// database reads the fixture's database.
func (f *fixture) database() *bloodravenv1alpha1.MysqlDatabase {
	f.t.Helper()
	db := &bloodravenv1alpha1.MysqlDatabase{}
	if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "counter-app"}, db); err != nil {
		f.t.Fatal(err)
	}
	return db
}

// ddlLease takes the migration lease of op and reports its DDL boundary.
func (f *fixture) ddlLease(op string, ttl int) string {
	f.t.Helper()
	token, _ := f.grant("migration", op, ttl)
	if r := f.call(http.MethodPut, "/leases/migration/"+op, map[string]any{"token": token, "phase": "ddl"}); r.status != http.StatusOK {
		f.t.Fatalf("phase ddl: %d %v", r.status, r.body)
	}
	return token
}

func TestTheGateClosesWhenAMigrationEndsPastItsDDLBoundaryAndOpensOnTheAnnotation(t *testing.T) {
	for _, tc := range []struct {
		name          string
		end           func(f *fixture)
		ended, reason string
	}{
		{"its lease expires", func(f *fixture) { f.clock.Step(31 * time.Second) }, "expired", ""},
		{"the operator revokes it", func(f *fixture) {
			f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
				metav1.SetMetaDataAnnotation(&g.ObjectMeta, bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation, "")
			})
		}, "revoked", "operator_revoked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, true)
			f.settle()
			f.ddlLease("op-1", 30)
			tc.end(f)
			f.reconcile() // the group controller's bookkeeping, with no grant asking

			p := f.database().Status.PendingVerification
			if p == nil || p.OperationID != "op-1" || p.Ended != tc.ended || p.Reason != tc.reason || p.Announced {
				t.Fatalf("pendingVerification = %+v, want op-1 %s %s, not announced yet", p, tc.ended, tc.reason)
			}

			bc := record.NewBroadcaster()
			bc.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: env.Kube.CoreV1().Events("")})
			t.Cleanup(bc.Shutdown)
			dr := &DatabaseReconciler{Client: env.Client, Clock: f.clock, Recorder: bc.NewRecorder(env.Scheme, corev1.EventSource{Component: "bloodraven"})}
			req := ctrl.Request{NamespacedName: client.ObjectKey{Namespace: f.ns, Name: "counter-app"}}
			reconcileDB := func() {
				t.Helper()
				if _, err := dr.Reconcile(f.ctx, req); err != nil {
					t.Fatal(err)
				}
			}
			reconcileDB()
			reconcileDB() // announced once, whatever runs again
			if evs := f.eventsOf("counter-app", "SchemaVerificationRequired", 1); len(evs) != 1 || evs[0].Type != corev1.EventTypeWarning {
				t.Fatalf("SchemaVerificationRequired events: %+v", evs)
			} else {
				mustContain(t, evs[0].Message, "op-1", tc.ended, bloodravenv1alpha1.SchemaVerifiedAnnotation+"=op-1")
			}
			if !f.database().Status.PendingVerification.Announced {
				t.Fatal("not marked announced")
			}
			if r := f.call(http.MethodPost, "/leases", map[string]any{"kind": "migration", "operationId": "op-2", "instance": "counter-app"}); r.status != http.StatusConflict || r.body["error"] != "verification_required" {
				t.Fatalf("a new migration while plannedRequest: %d %v", r.status, r.body)
			}

			// Another operation's name verifies nothing.
			annotate := func(op string) {
				t.Helper()
				db := f.database()
				patch := client.MergeFrom(db.DeepCopy())
				metav1.SetMetaDataAnnotation(&db.ObjectMeta, bloodravenv1alpha1.SchemaVerifiedAnnotation, op)
				if err := env.Client.Patch(f.ctx, db, patch); err != nil {
					t.Fatal(err)
				}
			}
			annotate("op-0")
			reconcileDB()
			if db := f.database(); db.Status.PendingVerification == nil || db.Annotations[bloodravenv1alpha1.SchemaVerifiedAnnotation] != "op-0" {
				t.Fatalf("a wrong verification changed something: %+v %v", db.Status.PendingVerification, db.Annotations)
			}
			annotate("op-1")
			reconcileDB()
			reconcileDB()
			db := f.database()
			c := meta.FindStatusCondition(db.Status.Conditions, policy.ConditionSchemaVerificationRequired)
			if db.Status.PendingVerification != nil || db.Status.LastVerifiedOperationID != "op-1" || c == nil || c.Status != metav1.ConditionFalse {
				t.Fatalf("after verification: %+v, condition %+v", db.Status, c)
			}
			if _, ok := db.Annotations[bloodravenv1alpha1.SchemaVerifiedAnnotation]; ok {
				t.Fatal("the annotation was not removed")
			}
			if evs := f.eventsOf("counter-app", "SchemaVerified", 1); len(evs) != 1 {
				t.Fatalf("SchemaVerified events: %+v", evs)
			}
			// The ended record still in the mutex does not gate again.
			f.reconcile()
			if p := f.database().Status.PendingVerification; p != nil {
				t.Fatalf("plannedRequest again: %+v", p)
			}
			f.grant("migration", "op-2", 30)
		})
	}
}

// Issue 35, item 4 (docs/gate.md "verification covers one tenure"): op-x's
// runner dies past its DDL boundary (the lease expires: gated), a person
// verifies op-x, op-x is re-run under the same id, reports ddl and dies
// again. The gate closes again for the re-run, and a new operation is
// refused. At e3e472e the verification of op-x covered the re-run too: the
// gate stayed open and op-y was granted over a half-applied change.
func TestARerunOfAVerifiedOperationClosesTheGateAgain(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	dr := &DatabaseReconciler{Client: env.Client, Clock: f.clock, Recorder: record.NewFakeRecorder(100)}
	req := ctrl.Request{NamespacedName: client.ObjectKey{Namespace: f.ns, Name: "counter-app"}}
	verify := func(op string) {
		t.Helper()
		db := f.database()
		patch := client.MergeFrom(db.DeepCopy())
		metav1.SetMetaDataAnnotation(&db.ObjectMeta, bloodravenv1alpha1.SchemaVerifiedAnnotation, op)
		if err := env.Client.Patch(f.ctx, db, patch); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if _, err := dr.Reconcile(f.ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		if st := f.database().Status; st.PendingVerification != nil || st.LastVerifiedOperationID != op || st.LastVerifiedTenureStart == nil {
			t.Fatalf("after verifying %s: %+v", op, st)
		}
	}

	f.ddlLease("op-x", 30)
	f.clock.Step(31 * time.Second) // the runner was SIGKILLed: its lease expires
	f.reconcile()
	first := f.database().Status.PendingVerification
	if first == nil || first.OperationID != "op-x" || first.TenureStart == nil {
		t.Fatalf("first run: pendingVerification %+v", first)
	}
	verify("op-x")

	// The re-run of op-x takes the lapsed mutex over: a new tenure.
	f.clock.Step(time.Second)
	f.ddlLease("op-x", 30)
	f.clock.Step(31 * time.Second)
	f.reconcile()
	again := f.database().Status.PendingVerification
	if again == nil || again.OperationID != "op-x" || again.TenureStart == nil || !again.TenureStart.After(first.TenureStart.Time) {
		t.Fatalf("the re-run past its DDL boundary left the gate %+v; want it closed for the re-run's tenure", again)
	}
	if r := f.call(http.MethodPost, "/leases", map[string]any{"kind": "migration", "operationId": "op-y", "instance": "counter-app"}); r.status != http.StatusConflict || r.body["error"] != "verification_required" {
		t.Fatalf("a new operation after the re-run's loss: %d %v, want 409 verification_required", r.status, r.body)
	}
	verify("op-x")
	f.reconcile()
	if p := f.database().Status.PendingVerification; p != nil {
		t.Fatalf("the verified re-run plannedRequest again: %+v", p)
	}
	f.grant("migration", "op-y", 30)
}
