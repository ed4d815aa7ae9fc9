package webhook

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

func newGroup(t *testing.T, c client.Client, ns string) *bloodravenv1alpha1.MysqlFailoverGroup {
	t.Helper()
	g := &bloodravenv1alpha1.MysqlFailoverGroup{ObjectMeta: metav1.ObjectMeta{Name: "playground", Namespace: ns},
		Spec: bloodravenv1alpha1.MysqlFailoverGroupSpec{Sites: []bloodravenv1alpha1.Site{{Name: "iad"}, {Name: "pdx"}}}}
	if err := c.Create(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	return g
}

// patchStatus merge-patches the status subresource as the given user.
func patchStatus(c client.Client, g *bloodravenv1alpha1.MysqlFailoverGroup, patch string) error {
	return c.Status().Patch(context.Background(), g.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(patch)))
}

// The fence's rules hold the operator too: its writes skip the status
// webhook, and the fence guard (FenceGuard), evaluated by the API server,
// refuses its moves against the rules; an administrator's edit of the fence
// is refused by the status webhook with what to do instead.
func TestFenceGuardThroughTheAPIServer(t *testing.T) {
	admin, _ := env.User(t, "alice@example.com", "system:masters")
	operator, _ := env.User(t, operatorIdentity, "system:masters")
	ns := env.Namespace(t)
	g := newGroup(t, admin, ns)

	t.Run("an administrator's generation edit is rejected with what to do instead", func(t *testing.T) {
		err := patchStatus(admin, g, `{"status":{"topologyGeneration":1,"activeSite":"iad"}}`)
		if !apierrors.IsInvalid(err) {
			t.Fatalf("err = %v, want Invalid", err)
		}
		for _, want := range []string{"status.topologyGeneration", "lying to the fence", bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation, "spec.plannedFailover"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("message %q lacks %q", err, want)
			}
		}
		t.Logf("administrator's patch denied: %v", err)
	})
	steps := []struct {
		name, patch string
		wantErr     string
	}{
		{"the operator completes bootstrap: 0 to 1 with the first site", `{"status":{"topologyGeneration":1,"activeSite":"iad"}}`, ""},
		{"the operator fails over: +1 with a site change", `{"status":{"topologyGeneration":2,"activeSite":"pdx"}}`, ""},
		{"the operator may not decrease it", `{"status":{"topologyGeneration":1,"activeSite":"iad"}}`, "never decreases"},
		{"the operator may not skip", `{"status":{"topologyGeneration":4,"activeSite":"iad"}}`, "exactly one"},
		{"the operator may not bump without a site change", `{"status":{"topologyGeneration":3}}`, "only with a change of active site"},
		{"the operator may not move the site without a bump", `{"status":{"activeSite":"iad"}}`, "only together with topologyGeneration+1"},
		{"the operator may not clear the active site", `{"status":{"topologyGeneration":3,"activeSite":null}}`, "names the new active site"},
		{"the operator may not promote an undeclared site", `{"status":{"topologyGeneration":3,"activeSite":"sfo"}}`, "status.activeSite: sfo is not one of spec.sites"},
		{"the operator announces a same-site promotion to another generation", `{"status":{"transition":{"operation":"RestoreInPlace","targetSite":"pdx","generation":4,"startedAt":"2026-11-29T10:00:00Z"}}}`, ""},
		{"a transition to another generation does not cover it", `{"status":{"topologyGeneration":3}}`, "only with a change of active site"},
		{"the operator announces a same-site promotion", `{"status":{"transition":{"operation":"RestoreInPlace","targetSite":"pdx","generation":3,"startedAt":"2026-11-29T10:00:00Z"}}}`, ""},
		{"the announced same-site promotion", `{"status":{"topologyGeneration":3,"transition":null}}`, ""},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			err := patchStatus(operator, g, st.patch)
			if st.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), st.wantErr) {
				t.Fatalf("err = %v, want Invalid mentioning %q", err, st.wantErr)
			}
		})
	}
	got := &bloodravenv1alpha1.MysqlFailoverGroup{}
	if err := admin.Get(context.Background(), client.ObjectKeyFromObject(g), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.TopologyGeneration != 3 || got.Status.ActiveSite != "pdx" {
		t.Fatalf("fence = %d/%s after the denied edits, want 3/pdx", got.Status.TopologyGeneration, got.Status.ActiveSite)
	}
}

// The status is the operator's alone (docs/fence.md): an administrator's
// `kubectl patch --subresource=status` of any field is refused, naming the
// field and what to do instead, and leaves the object as it was; the
// operator's identity writes the same patch; a patch that changes nothing is
// accepted from anyone.
func TestStatusIsTheOperatorsAlone(t *testing.T) {
	admin, _ := env.User(t, "alice@example.com", "system:masters")
	operator, _ := env.User(t, operatorIdentity, "system:masters")
	ns := env.Namespace(t)
	g := newGroup(t, admin, ns)
	if err := patchStatus(operator, g, `{"status":{"topologyGeneration":1,"activeSite":"iad"}}`); err != nil {
		t.Fatalf("bootstrap as the operator: %v", err)
	}
	get := func(t *testing.T) *bloodravenv1alpha1.MysqlFailoverGroup {
		t.Helper()
		got := &bloodravenv1alpha1.MysqlFailoverGroup{}
		if err := admin.Get(context.Background(), client.ObjectKeyFromObject(g), got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	const at = "2026-11-29T10:00:00Z"
	tests := []struct{ field, patch string }{
		{"status.transition", `{"status":{"transition":{"operation":"PlannedFailover","targetSite":"pdx","generation":2,"startedAt":"` + at + `"}}}`},
		{"status.health", `{"status":{"health":{"ready":true,"replicationRunning":true,"recoveryPending":false}}}`},
		{"status.plannedFailover", `{"status":{"plannedFailover":{"id":"req-42","targetSite":"pdx","phase":"Completed"}}}`},
		{"status.reservation", `{"status":{"reservation":{"operation":"PlannedFailover","id":"req-42","reservedAt":"` + at + `"}}}`},
		{"status.conditions", `{"status":{"conditions":[{"type":"Ready","status":"True","reason":"ByHand","message":"set by hand","lastTransitionTime":"` + at + `"}]}}`},
		{"status.primaryLostAt", `{"status":{"primaryLostAt":"` + at + `"}}`},
		{"status.observedGeneration", `{"status":{"observedGeneration":9}}`},
		{"status.updatedRevision", `{"status":{"updatedRevision":"r7"}}`},
		{"status.updatePhase", `{"status":{"updatePhase":"FailingOver"}}`},
		{"status.restoreInPlaceID", `{"status":{"restoreInPlaceID":"rip-1"}}`},
		{"status.restoreInPlace", `{"status":{"restoreInPlace":"Restoring"}}`},
		{"status.dragonflyUpgrade", `{"status":{"dragonflyUpgrade":"Completed"}}`},
	}
	for _, tc := range tests {
		t.Run(tc.field, func(t *testing.T) {
			before := get(t)
			err := patchStatus(admin, g, tc.patch)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("the administrator's patch of %s: err = %v, want Invalid", tc.field, err)
			}
			for _, want := range []string{tc.field + ": Forbidden", bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation, "spec.plannedFailover"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("message %q lacks %q", err, want)
				}
			}
			t.Logf("administrator's patch denied: %v", err)
			if after := get(t); after.ResourceVersion != before.ResourceVersion || !equality.Semantic.DeepEqual(after.Status, before.Status) {
				t.Fatalf("the denied patch changed the group: status %+v, was %+v", after.Status, before.Status)
			}

			if err := patchStatus(operator, g, tc.patch); err != nil {
				t.Fatalf("the operator's patch of %s: %v", tc.field, err)
			}
			written := get(t)
			if equality.Semantic.DeepEqual(written.Status, before.Status) {
				t.Fatalf("the operator's patch of %s did not change the status", tc.field)
			}

			if err := patchStatus(admin, g, tc.patch); err != nil {
				t.Fatalf("the administrator's patch that changes nothing: %v", err)
			}
			if after := get(t); !equality.Semantic.DeepEqual(after.Status, written.Status) {
				t.Fatalf("a patch that changes nothing changed the status: %+v, was %+v", after.Status, written.Status)
			}
		})
	}
}

func TestGroupSpecChecksThroughTheAPIServer(t *testing.T) {
	admin, _ := env.User(t, "alice@example.com", "system:masters")
	ns := env.Namespace(t)
	g := newGroup(t, admin, ns)
	ctx := context.Background()

	bad := g.DeepCopy()
	bad.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: "req-1", TargetSite: "sfo"}
	if err := admin.Update(ctx, bad); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.plannedFailover.targetSite") {
		t.Fatalf("unknown target: err = %v", err)
	}
	good := g.DeepCopy()
	good.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: "req-1", TargetSite: "pdx"}
	good.Annotations = map[string]string{bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation: "anything at all"}
	if err := admin.Update(ctx, good); err != nil {
		t.Fatalf("valid request with the revoke annotation: %v", err)
	}
}

func TestDatabaseChecksThroughTheAPIServer(t *testing.T) {
	admin, _ := env.User(t, "alice@example.com", "system:masters")
	ns := env.Namespace(t)
	mk := func(name string, clients ...map[string]any) *unstructured.Unstructured {
		list := []any{}
		for _, c := range clients {
			list = append(list, c)
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": bloodravenv1alpha1.GroupVersion.String(), "kind": "MysqlDatabase",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec":     map[string]any{"groupRef": map[string]any{"name": "playground"}, "databaseName": "counter", "deploymentClients": list},
		}}
	}
	tests := map[string]struct {
		obj     *unstructured.Unstructured
		wantErr string
	}{
		"duplicate namespaces":   {mk("dup", map[string]any{"namespace": "app", "serviceAccount": "a"}, map[string]any{"namespace": "app", "serviceAccount": "b"}), "spec.deploymentClients[1]"},
		"missing serviceAccount": {mk("nosa", map[string]any{"namespace": "app"}), "spec.deploymentClients[0].serviceAccount"},
		"invalid namespace":      {mk("badns", map[string]any{"namespace": "App", "serviceAccount": "a"}), "spec.deploymentClients[0].namespace"},
		"valid":                  {mk("ok", map[string]any{"namespace": "app", "serviceAccount": "deploy"}), ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := admin.Create(context.Background(), tc.obj)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want Invalid naming %s", err, tc.wantErr)
			}
		})
	}
}

// A valid update passes through the database webhook (failurePolicy Fail:
// a broken handler would refuse it).
func TestDatabaseWebhookAdmitsUpdates(t *testing.T) {
	admin, _ := env.User(t, "alice@example.com", "system:masters")
	ns := env.Namespace(t)
	db := &bloodravenv1alpha1.MysqlDatabase{ObjectMeta: metav1.ObjectMeta{Name: "counter-app", Namespace: ns},
		Spec: bloodravenv1alpha1.MysqlDatabaseSpec{GroupRef: bloodravenv1alpha1.GroupReference{Name: "playground"}, DatabaseName: "counter"}}
	if err := admin.Create(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	db.Spec.DeploymentClients = []bloodravenv1alpha1.DeploymentClient{{Namespace: "app", ServiceAccount: "deploy"}}
	if err := admin.Update(context.Background(), db); err != nil {
		t.Fatal(err)
	}
}
