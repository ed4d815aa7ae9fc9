package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/faultproxy"
)

// prompt is how long one of the operator's writes may take while the
// webhooks are black-holed: well under their 5-s timeout, which a write
// that waited on them would spend in full before it failed.
const prompt = 2 * time.Second

// blackHole takes the webhooks away for the rest of t, as a replica lost
// with its node does while it stays in the webhooks' Service: the API
// server's connections are accepted and never answered. Its cleanup brings
// them back and waits until they answer again.
func blackHole(t *testing.T) {
	t.Helper()
	webhookProxy.SetMode(faultproxy.BlackHole)
	t.Cleanup(func() {
		webhookProxy.SetMode(faultproxy.Pass)
		// The first calls after the partition may meet connections it
		// reset; a dry-run create through the database webhook shows
		// when they answer again.
		ns := env.Namespace(t)
		db := &bloodravenv1alpha1.MysqlDatabase{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns},
			Spec: bloodravenv1alpha1.MysqlDatabaseSpec{GroupRef: bloodravenv1alpha1.GroupReference{Name: "playground"}, DatabaseName: "probe"}}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			err := env.Client.Create(context.Background(), db.DeepCopy(), client.DryRunAll)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the webhooks do not answer again after the black hole: %v", err)
			}
		}
	})
}

// The operator's own writes never wait on its own webhooks (docs/fence.md,
// "Invariants"). With the webhooks' endpoint black-holed, every kind
// of write the operator makes — its group's status (bootstrap, a
// transition, a promotion), bookkeeping on the group's metadata, a
// database's status, DeployRuns created, written and pruned — succeeds at
// once, and the fence guard still refuses it a move against the fence's
// rules, at once too. A person's status edit and a look-alike
// ServiceAccount's DeployRun write wait out the webhook timeout and are
// refused: people's edits fail closed while no replica answers.
func TestTheOperatorsWritesNeverWaitOnItsWebhooks(t *testing.T) {
	ctx := context.Background()
	admin, _ := env.User(t, "alice@example.com", "system:masters")
	operator, _ := env.User(t, operatorIdentity, "system:masters")
	lookalike, _ := env.User(t, operatorIdentity+"-2", "system:masters") // the operator's namespace, another ServiceAccount
	ns := env.Namespace(t)
	g := newGroup(t, admin, ns)
	g.Annotations = map[string]string{bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation: "true"}
	if err := admin.Update(ctx, g); err != nil {
		t.Fatal(err)
	}
	db := &bloodravenv1alpha1.MysqlDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "counter-app"},
		Spec: bloodravenv1alpha1.MysqlDatabaseSpec{GroupRef: bloodravenv1alpha1.GroupReference{Name: "playground"}, DatabaseName: "counter"}}
	if err := admin.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	newRun := func(name string) *bloodravenv1alpha1.DeployRun {
		return &bloodravenv1alpha1.DeployRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: bloodravenv1alpha1.DeployRunSpec{GroupRef: bloodravenv1alpha1.GroupReference{Name: "playground"}, Instance: "counter-app",
				OperationID: "deploy-1", Caller: "system:serviceaccount:app:deploy", GrantGeneration: 1}}
	}
	pruned := newRun("playground-ba9876543210")
	if err := operator.Create(ctx, pruned); err != nil {
		t.Fatal(err)
	}
	run := newRun("playground-0123456789ab")
	merge := func(patch string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(patch)) }
	const at = "2026-11-29T10:00:00Z"

	blackHole(t)

	writes := []struct {
		name  string
		write func() error
	}{
		{"bootstrap: the fence from 0 to 1", func() error {
			return patchStatus(operator, g, `{"status":{"topologyGeneration":1,"activeSite":"iad"}}`)
		}},
		{"a transition persisted", func() error {
			return patchStatus(operator, g, `{"status":{"transition":{"operation":"EmergencyFailover","targetSite":"pdx","generation":2,"startedAt":"`+at+`"}}}`)
		}},
		{"the promotion: the fence from 1 to 2", func() error {
			return patchStatus(operator, g, `{"status":{"topologyGeneration":2,"activeSite":"pdx","transition":null}}`)
		}},
		{"bookkeeping: a finalizer added and the revoke annotation removed", func() error {
			return operator.Patch(ctx, g.DeepCopy(), merge(`{"metadata":{"finalizers":["bloodraven.shipstream.io/deployment-leases"],"annotations":{"`+
				bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation+`":null}}}`))
		}},
		{"a database's gate closed", func() error {
			return operator.Status().Patch(ctx, db.DeepCopy(), merge(`{"status":{"pendingVerification":{"operationId":"deploy-1","topologyGeneration":1,"ended":"revoked","since":"`+at+`"}}}`))
		}},
		{"a DeployRun created", func() error { return operator.Create(ctx, run) }},
		{"its status written", func() error {
			return operator.Status().Patch(ctx, run.DeepCopy(), merge(`{"status":{"outcome":"running","phase":"pre-ddl"}}`))
		}},
		{"a DeployRun pruned", func() error { return operator.Delete(ctx, pruned) }},
	}
	for _, w := range writes {
		start := time.Now()
		err := w.write()
		took := time.Since(start)
		if err != nil {
			t.Fatalf("the operator's write (%s) with the webhooks black-holed, after %v: %v", w.name, took.Round(time.Millisecond), err)
		}
		if took > prompt {
			t.Errorf("the operator's write (%s) took %v with the webhooks black-holed, want under %v", w.name, took.Round(time.Millisecond), prompt)
		}
		t.Logf("the operator's write (%s): %v", w.name, took.Round(time.Millisecond))
	}

	t.Run("the fence guard still holds the operator to the rules, at once", func(t *testing.T) {
		start := time.Now()
		err := patchStatus(operator, g, `{"status":{"topologyGeneration":4,"activeSite":"iad"}}`)
		if err == nil || !strings.Contains(err.Error(), "moves by exactly one") {
			t.Fatalf("the operator's skip of the generation: err = %v, want the fence guard's refusal", err)
		}
		if took := time.Since(start); took > prompt {
			t.Errorf("the fence guard's refusal took %v, want under %v", took.Round(time.Millisecond), prompt)
		}
	})

	refusedClosed := func(t *testing.T, who string, err error, took time.Duration) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
			t.Fatalf("%s's write with the webhooks black-holed: err = %v, want it refused for want of a webhook's answer", who, err)
		}
		t.Logf("%s's write refused after %v: %v", who, took.Round(time.Millisecond), err)
	}
	t.Run("a person's status edit fails closed", func(t *testing.T) {
		start := time.Now()
		err := patchStatus(admin, g, `{"status":{"topologyGeneration":3,"activeSite":"iad"}}`)
		refusedClosed(t, "alice", err, time.Since(start))
		got := &bloodravenv1alpha1.MysqlFailoverGroup{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(g), got); err != nil {
			t.Fatal(err)
		}
		if got.Status.TopologyGeneration != 2 || got.Status.ActiveSite != "pdx" {
			t.Fatalf("fence = %d/%s after the refused edit, want 2/pdx", got.Status.TopologyGeneration, got.Status.ActiveSite)
		}
	})
	t.Run("another ServiceAccount's DeployRun write fails closed", func(t *testing.T) {
		start := time.Now()
		err := lookalike.Status().Patch(ctx, run.DeepCopy(), merge(`{"status":{"outcome":"succeeded"}}`))
		refusedClosed(t, operatorIdentity+"-2", err, time.Since(start))
	})
}
