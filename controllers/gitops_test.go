package controllers

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/testenv"
)

// argoHealth runs the Argo CD health check of kind from
// examples/argocd/health.yaml on obj, as Argo CD does: obj is a global
// table, the script returns hs with status and message.
func argoHealth(t *testing.T, kind string, obj map[string]any) (status, message string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "examples", "argocd", "health.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	script, ok := cm.Data["resource.customizations.health.bloodraven.shipstream.io_"+kind]
	if !ok {
		t.Fatalf("examples/argocd/health.yaml has no health check for %s", kind)
	}
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoString(script); err != nil {
		t.Fatalf("health check of %s: %v", kind, err)
	}
	hs, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		t.Fatalf("health check of %s returned %v, not a table", kind, L.Get(-1))
	}
	return lua.LVAsString(hs.RawGetString("status")), lua.LVAsString(hs.RawGetString("message"))
}

// toLua converts JSON-shaped Go values as Argo CD does: objects to tables
// by key, arrays to tables indexed from 1.
func toLua(L *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case map[string]any:
		t := L.NewTable()
		for k, x := range v {
			t.RawSetString(k, toLua(L, x))
		}
		return t
	case []any:
		t := L.NewTable()
		for _, x := range v {
			t.Append(toLua(L, x))
		}
		return t
	case string:
		return lua.LString(v)
	case bool:
		return lua.LBool(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	case nil:
		return lua.LNil
	default:
		panic(fmt.Sprintf("toLua: %T", v))
	}
}

// asJSON reads obj back from the API server as the JSON Argo CD sees.
func (f *fixture) asJSON(obj client.Object, kind string) map[string]any {
	f.t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(bloodravenv1alpha1.GroupVersion.WithKind(kind))
	if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(obj), u); err != nil {
		f.t.Fatal(err)
	}
	return u.Object
}

// condition is the status of c's type in conds, "" when absent.
func condition(conds []metav1.Condition, typ string) string {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return string(c.Status) + "/" + c.Reason
	}
	return ""
}

// A DeployRun carries kstatus's conditions, and the Argo CD health check
// shipped in examples/argocd reads them, on runs the operator wrote: a
// running run is Reconciling (Progressing), a succeeded one Ready (Healthy),
// a revoked one Stalled with its reason (Degraded).
func TestArgoCDHealthOfRealRuns(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	check := func(op string, ready, reconciling, stalled, health, message string) {
		t.Helper()
		r := f.runOf(op)
		got := []string{condition(r.Status.Conditions, "Ready"), condition(r.Status.Conditions, "Reconciling"), condition(r.Status.Conditions, "Stalled")}
		if got[0] != ready || got[1] != reconciling || got[2] != stalled {
			t.Errorf("%s: Ready %s, Reconciling %s, Stalled %s; want %s, %s, %s", op, got[0], got[1], got[2], ready, reconciling, stalled)
		}
		if r.Status.ObservedGeneration != r.Generation || r.Generation == 0 {
			t.Errorf("%s: observedGeneration %d, generation %d", op, r.Status.ObservedGeneration, r.Generation)
		}
		status, msg := argoHealth(t, "DeployRun", f.asJSON(r, "DeployRun"))
		if status != health || !strings.Contains(msg, message) {
			t.Errorf("%s: Argo CD health %s %q, want %s with %q", op, status, msg, health, message)
		}
	}

	token, _ := f.grant("migration", "op-1", 30)
	check("op-1", "False/Running", "True/Running", "False/Running", "Progressing", "holds the migration mutex")
	start := meta.FindStatusCondition(f.runOf("op-1").Status.Conditions, "Reconciling").LastTransitionTime
	f.clock.Step(time.Second)
	if r := f.call(http.MethodPut, "/leases/migration/op-1", map[string]any{"token": token, "phase": "ddl"}); r.status != http.StatusOK {
		t.Fatalf("phase ddl: %d %v", r.status, r.body)
	}
	f.reconcile() // the bookkeeping projects the phase onto the run
	if c := meta.FindStatusCondition(f.runOf("op-1").Status.Conditions, "Reconciling"); !c.LastTransitionTime.Equal(&start) || !strings.Contains(c.Message, "phase ddl") {
		t.Errorf("a renewal that changed the phase moved Reconciling's transition (%v, was %v) or kept its message (%q)", c.LastTransitionTime, start, c.Message)
	}
	f.clock.Step(time.Second)
	if r := f.call(http.MethodPut, "/leases/migration/op-1", map[string]any{"token": token, "phase": "done"}); r.status != http.StatusOK {
		t.Fatalf("phase done: %d %v", r.status, r.body)
	}
	if r := f.call(http.MethodDelete, "/leases/migration/op-1", nil, "X-Lease-Token", token, "X-Deploy-Outcome", "succeeded"); r.status != http.StatusNoContent {
		t.Fatalf("release: %d %v", r.status, r.body)
	}
	f.reconcile()
	check("op-1", "True/Succeeded", "False/Succeeded", "False/Succeeded", "Healthy", "reported success")
	if c := meta.FindStatusCondition(f.runOf("op-1").Status.Conditions, "Ready"); !c.LastTransitionTime.Time.Equal(f.clock.Now().Truncate(time.Second)) {
		t.Errorf("Ready's transition %v, want the release's time %v (the injected clock)", c.LastTransitionTime, f.clock.Now())
	}

	f.ddlLease("op-2", 30)
	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
		metav1.SetMetaDataAnnotation(&g.ObjectMeta, bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation, "")
	})
	f.reconcile()
	check("op-2", "False/Revoked", "False/Revoked", "True/Revoked", "Degraded", "operator_revoked")

	// A run written before the conditions existed: the outcome decides.
	r := f.asJSON(f.runOf("op-2"), "DeployRun")
	delete(r["status"].(map[string]any), "conditions")
	if status, _ := argoHealth(t, "DeployRun", r); status != "Degraded" {
		t.Errorf("a revoked run without conditions is %s, want Degraded", status)
	}
}

// The MysqlDatabase health check is Degraded while the database's
// verification gate is closed, and Healthy once a person verified it.
func TestArgoCDHealthOfRealDatabases(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	dbr := &DatabaseReconciler{Client: env.Client, Clock: f.clock}
	reconcileDB := func() {
		t.Helper()
		if _, err := dbr.Reconcile(f.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: f.ns, Name: "counter-app"}}); err != nil {
			t.Fatal(err)
		}
	}
	reconcileDB()
	if status, msg := argoHealth(t, "MysqlDatabase", f.asJSON(f.database(), "MysqlDatabase")); status != "Healthy" {
		t.Fatalf("a database with its group and clients: %s %q, want Healthy", status, msg)
	}
	f.ddlLease("op-1", 30)
	f.clock.Step(31 * time.Second)
	f.reconcile()
	if f.database().Status.PendingVerification == nil {
		t.Fatal("the gate did not close")
	}
	status, msg := argoHealth(t, "MysqlDatabase", f.asJSON(f.database(), "MysqlDatabase"))
	if status != "Degraded" || !strings.Contains(msg, "op-1") || !strings.Contains(msg, "kubectl bloodraven verify counter-app op-1") {
		t.Fatalf("a gated database: %s %q, want Degraded naming op-1 and the verify command", status, msg)
	}
}
