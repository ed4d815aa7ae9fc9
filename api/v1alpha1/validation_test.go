package v1alpha1_test

import (
	"context"
	"os"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

func database(ns, name string, clients ...map[string]any) *unstructured.Unstructured {
	list := make([]any, 0, len(clients))
	for _, c := range clients {
		list = append(list, c)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": bloodravenv1alpha1.GroupVersion.String(),
		"kind":       "MysqlDatabase",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"groupRef":          map[string]any{"name": "orders"},
			"databaseName":      "orders",
			"deploymentClients": list,
		},
	}}
	return u
}

// The API server itself, through the generated CRD schema, must refuse a
// broken client list even when no webhook runs.
func TestAPIServerValidatesDeploymentClients(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	tests := map[string]struct {
		obj     *unstructured.Unstructured
		wantErr []string // substrings of the Invalid error; empty = accepted
	}{
		"two entries for one namespace are rejected": {
			obj: database(ns, "dup",
				map[string]any{"namespace": "application", "serviceAccount": "a"},
				map[string]any{"namespace": "application", "serviceAccount": "b"}),
			wantErr: []string{"spec.deploymentClients[1]", "Duplicate value"},
		},
		"an entry without serviceAccount is rejected": {
			obj:     database(ns, "nosa", map[string]any{"namespace": "application"}),
			wantErr: []string{"spec.deploymentClients[0].serviceAccount", "Required value"},
		},
		"an entry without namespace is rejected": {
			obj:     database(ns, "nons", map[string]any{"serviceAccount": "deploy"}),
			wantErr: []string{"spec.deploymentClients[0].namespace", "Required value"},
		},
		"an invalid namespace name is rejected": {
			obj:     database(ns, "badns", map[string]any{"namespace": "Not_A_Namespace", "serviceAccount": "deploy"}),
			wantErr: []string{"spec.deploymentClients[0].namespace"},
		},
		"an invalid ServiceAccount name is rejected": {
			obj:     database(ns, "badsa", map[string]any{"namespace": "application", "serviceAccount": "Deploy Bot"}),
			wantErr: []string{"spec.deploymentClients[0].serviceAccount"},
		},
		"one entry per namespace is accepted": {
			obj: database(ns, "ok",
				map[string]any{"namespace": "application", "serviceAccount": "deploy"},
				map[string]any{"namespace": "batch", "serviceAccount": "deploy"}),
		},
		"no deployment clients is accepted": {
			obj: database(ns, "none"),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := env.Client.Create(ctx, tc.obj)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("create: %v", err)
				}
				return
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("create error = %v, want Invalid", err)
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			// Nothing was stored.
			got := tc.obj.DeepCopy()
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(tc.obj), got); !apierrors.IsNotFound(err) {
				t.Errorf("rejected object is readable: err=%v", err)
			}
		})
	}
}

func TestDatabaseGroupRefIsImmutable(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	db := &bloodravenv1alpha1.MysqlDatabase{
		ObjectMeta: metav1.ObjectMeta{Name: "counter-app", Namespace: ns},
		Spec:       bloodravenv1alpha1.MysqlDatabaseSpec{GroupRef: bloodravenv1alpha1.GroupReference{Name: "playground"}, DatabaseName: "counter"},
	}
	if err := env.Client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	db.Spec.GroupRef.Name = "other"
	err := env.Client.Update(ctx, db)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "groupRef is immutable") {
		t.Fatalf("update groupRef: err=%v, want Invalid 'groupRef is immutable'", err)
	}
}

func TestFailoverGroupDefaultsAndStatusSchema(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	g := &bloodravenv1alpha1.MysqlFailoverGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "playground", Namespace: ns},
		Spec:       bloodravenv1alpha1.MysqlFailoverGroupSpec{Sites: []bloodravenv1alpha1.Site{{Name: "iad"}, {Name: "pdx"}}},
	}
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	if g.Spec.FailureDetectionSeconds != 30 {
		t.Errorf("failureDetectionSeconds default = %d, want 30", g.Spec.FailureDetectionSeconds)
	}
	for _, s := range g.Spec.Sites {
		if s.Port != 3306 {
			t.Errorf("site %s port default = %d, want 3306", s.Name, s.Port)
		}
	}

	t.Run("status is a subresource: a spec update does not write status", func(t *testing.T) {
		cp := g.DeepCopy()
		cp.Status.TopologyGeneration = 5
		if err := env.Client.Update(ctx, cp); err != nil {
			t.Fatal(err)
		}
		if cp.Status.TopologyGeneration != 0 {
			t.Fatalf("status written through the main resource: generation %d", cp.Status.TopologyGeneration)
		}
	})
	t.Run("an unknown planned-failover phase is rejected", func(t *testing.T) {
		cp := g.DeepCopy()
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), cp); err != nil {
			t.Fatal(err)
		}
		cp.Status.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverStatus{ID: "x", Phase: "Sleeping"}
		err := env.Client.Status().Update(ctx, cp)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "status.plannedFailover.phase") {
			t.Fatalf("err=%v, want Invalid on status.plannedFailover.phase", err)
		}
	})
	t.Run("a negative topology generation is rejected", func(t *testing.T) {
		cp := g.DeepCopy()
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), cp); err != nil {
			t.Fatal(err)
		}
		cp.Status.TopologyGeneration = -1
		err := env.Client.Status().Update(ctx, cp)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "status.topologyGeneration") {
			t.Fatalf("err=%v, want Invalid on status.topologyGeneration", err)
		}
	})
	t.Run("duplicate site names are rejected", func(t *testing.T) {
		dup := &bloodravenv1alpha1.MysqlFailoverGroup{
			ObjectMeta: metav1.ObjectMeta{Name: "dup", Namespace: ns},
			Spec:       bloodravenv1alpha1.MysqlFailoverGroupSpec{Sites: []bloodravenv1alpha1.Site{{Name: "iad"}, {Name: "iad"}}},
		}
		err := env.Client.Create(ctx, dup)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "Duplicate value") {
			t.Fatalf("err=%v, want Invalid Duplicate value", err)
		}
	})
}
