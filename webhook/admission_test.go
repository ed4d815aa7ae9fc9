package webhook

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/testenv"
)

const operatorIdentity = "system:serviceaccount:bloodraven-system:bloodraven"

var env *testenv.Env

func TestMain(m *testing.M) {
	opts := testenv.Options{Webhooks: envtest.WebhookInstallOptions{Paths: []string{filepath.Join(testenv.RepoRoot(), "config", "webhook")}}}
	os.Exit(testenv.MainWithOptions(m, &env, opts, func(e *testenv.Env) (func(), error) {
		wio := &e.Environment.WebhookInstallOptions
		srv := crwebhook.NewServer(crwebhook.Options{Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir})
		Register(srv, e.Scheme, operatorIdentity)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _ = srv.Start(ctx) }()
		addr := net.JoinHostPort(wio.LocalServingHost, fmt.Sprint(wio.LocalServingPort))
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // readiness probe only
			if err == nil {
				conn.Close()
				break
			}
			if time.Now().After(deadline) {
				cancel()
				return nil, fmt.Errorf("webhook server not serving: %w", err)
			}
		}
		return cancel, nil
	}))
}

func newGroup(t *testing.T, c client.Client, ns string) *v1.MysqlFailoverGroup {
	t.Helper()
	g := &v1.MysqlFailoverGroup{ObjectMeta: metav1.ObjectMeta{Name: "playground", Namespace: ns},
		Spec: v1.MysqlFailoverGroupSpec{Sites: []v1.Site{{Name: "iad"}, {Name: "pdx"}}}}
	if err := c.Create(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	return g
}

// patchStatus merge-patches the status subresource as the given user.
func patchStatus(c client.Client, g *v1.MysqlFailoverGroup, patch string) error {
	return c.Status().Patch(context.Background(), g.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(patch)))
}

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
		for _, want := range []string{"status.topologyGeneration", "lying to the fence", v1.RevokeDeploymentLeasesAnnotation, "spec.plannedFailover"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("message %q lacks %q", err, want)
			}
		}
		t.Logf("administrator's patch denied: %v", err)
	})
	t.Run("an administrator may change other status fields", func(t *testing.T) {
		if err := patchStatus(admin, g, `{"status":{"health":{"ready":false,"replicationRunning":true,"recoveryPending":false}}}`); err != nil {
			t.Fatal(err)
		}
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
	got := &v1.MysqlFailoverGroup{}
	if err := admin.Get(context.Background(), client.ObjectKeyFromObject(g), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.TopologyGeneration != 2 || got.Status.ActiveSite != "pdx" {
		t.Fatalf("fence = %d/%s after the denied edits, want 2/pdx", got.Status.TopologyGeneration, got.Status.ActiveSite)
	}
}

func TestGroupSpecChecksThroughTheAPIServer(t *testing.T) {
	admin, _ := env.User(t, "alice@example.com", "system:masters")
	ns := env.Namespace(t)
	g := newGroup(t, admin, ns)
	ctx := context.Background()

	bad := g.DeepCopy()
	bad.Spec.PlannedFailover = &v1.PlannedFailoverRequest{ID: "req-1", TargetSite: "sfo"}
	if err := admin.Update(ctx, bad); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.plannedFailover.targetSite") {
		t.Fatalf("unknown target: err = %v", err)
	}
	good := g.DeepCopy()
	good.Spec.PlannedFailover = &v1.PlannedFailoverRequest{ID: "req-1", TargetSite: "pdx"}
	good.Annotations = map[string]string{v1.RevokeDeploymentLeasesAnnotation: "anything at all"}
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
			"apiVersion": v1.GroupVersion.String(), "kind": "MysqlDatabase",
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
	db := &v1.MysqlDatabase{ObjectMeta: metav1.ObjectMeta{Name: "counter-app", Namespace: ns},
		Spec: v1.MysqlDatabaseSpec{GroupRef: v1.GroupReference{Name: "playground"}, DatabaseName: "counter"}}
	if err := admin.Create(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	db.Spec.DeploymentClients = []v1.DeploymentClient{{Namespace: "app", ServiceAccount: "deploy"}}
	if err := admin.Update(context.Background(), db); err != nil {
		t.Fatal(err)
	}
}
