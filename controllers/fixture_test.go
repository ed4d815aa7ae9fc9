package controllers

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/deployapi"
	"github.com/shipstream/bloodraven/internal/scene"
	"github.com/shipstream/bloodraven/internal/testenv"
	"github.com/shipstream/bloodraven/store/leasestore"
	"github.com/shipstream/bloodraven/topology/memory"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

// fixture: one group with a simulated data plane, the controller, and the
// deployment API, all on one fake clock, against the real API server.
type fixture struct {
	t       *testing.T
	ctx     context.Context
	ns      string
	group   *bloodravenv1alpha1.MysqlFailoverGroup
	clock   *clocktesting.FakeClock
	driver  *memory.Driver
	rec     *GroupReconciler
	api     *deployapi.Server
	token   string
	reg     *prometheus.Registry
	metrics *Metrics
}

func newFixture(t *testing.T, withDriver bool) *fixture {
	t.Helper()
	f := &fixture{t: t, ctx: context.Background(), clock: clocktesting.NewFakeClock(time.Now().UTC().Truncate(time.Microsecond)), reg: prometheus.NewRegistry()}
	f.ns = env.Namespace(t)
	f.group = scene.Group(f.ns, "playground")
	f.group.Spec.FailureDetectionSeconds = 30
	if err := env.Client.Create(f.ctx, f.group); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(f.ctx, scene.Database(f.ns, "counter-app", "playground", bloodravenv1alpha1.DeploymentClient{Namespace: f.ns, ServiceAccount: "deploy"})); err != nil {
		t.Fatal(err)
	}
	var err error
	if f.token, err = scene.Token(f.ctx, env.Kube, f.ns, "deploy", []string{scene.DeployAudience}, time.Hour); err != nil {
		t.Fatal(err)
	}

	store := &leasestore.Store{Client: env.Client, API: env.Client, Clock: f.clock, Key: testRecordKey}
	if f.metrics, err = NewMetrics(f.reg, f.clock); err != nil {
		t.Fatal(err)
	}
	bc := record.NewBroadcaster()
	bc.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: env.Kube.CoreV1().Events("")})
	t.Cleanup(bc.Shutdown)
	f.rec = &GroupReconciler{Client: env.Client, API: env.Client, Leases: store, Clock: f.clock,
		Recorder: bc.NewRecorder(env.Scheme, corev1.EventSource{Component: "bloodraven"}), Metrics: f.metrics,
		ProbeInterval: time.Hour} // timers under test, not the periodic probe, set the requeue
	if withDriver {
		f.driver = memory.New()
		f.driver.Seed(f.group, "iad")
		f.rec.Driver = f.driver
	}
	f.api, err = deployapi.New(deployapi.Config{IsLeader: func() bool { return true }, Clock: f.clock, Kube: env.Kube, FairShare: roomyShare,
		API: env.Client, Leases: store, Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// reconcile runs one reconcile and fails the test on error.
func (f *fixture) reconcile() ctrl.Result {
	f.t.Helper()
	res, err := f.rec.Reconcile(f.ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.group)})
	if err != nil {
		f.t.Fatalf("reconcile: %v", err)
	}
	return res
}

// settle reconciles until nothing asks for an immediate requeue.
func (f *fixture) settle() ctrl.Result {
	f.t.Helper()
	for i := 0; i < 10; i++ {
		res := f.reconcile()
		//lint:ignore SA1019 Requeue marks "probe again now" (see Reconcile)
		if !res.Requeue {
			return res
		}
	}
	f.t.Fatal("reconcile never settled")
	return ctrl.Result{}
}

func (f *fixture) get() *bloodravenv1alpha1.MysqlFailoverGroup {
	f.t.Helper()
	g := &bloodravenv1alpha1.MysqlFailoverGroup{}
	if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(f.group), g); err != nil {
		f.t.Fatal(err)
	}
	return g
}

func (f *fixture) patchSpec(mutate func(*bloodravenv1alpha1.MysqlFailoverGroup)) {
	f.t.Helper()
	g := f.get()
	mutate(g)
	if err := env.Client.Update(f.ctx, g); err != nil {
		f.t.Fatal(err)
	}
}

type apiResp struct {
	status int
	body   map[string]any
}

func (f *fixture) call(method, path string, body any, headers ...string) apiResp {
	f.t.Helper()
	r, err := scene.ForHandler(f.api.Handler(), f.token).Send(method, "/deploy/v1/groups/playground"+path, body, headers...)
	if err != nil {
		f.t.Fatal(err)
	}
	return apiResp{status: r.Status, body: r.Body}
}

func (f *fixture) grant(kind, op string, ttl int) (token string, expires time.Time) {
	f.t.Helper()
	r := f.call(http.MethodPost, "/leases", map[string]any{"kind": kind, "operationId": op, "instance": "counter-app", "ttlSeconds": ttl})
	if r.status != http.StatusCreated && r.status != http.StatusOK {
		f.t.Fatalf("grant %s %s: %d %v", kind, op, r.status, r.body)
	}
	exp, _ := time.Parse(time.RFC3339Nano, r.body["expiresAt"].(string))
	return r.body["token"].(string), exp
}

func (f *fixture) renew(kind, op, token string) apiResp {
	f.t.Helper()
	return f.call(http.MethodPut, "/leases/"+kind+"/"+op, map[string]any{"token": token})
}

// events lists the group's Events with reason, waiting for the asynchronous
// recorder.
func (f *fixture) events(reason string, want int) []corev1.Event {
	f.t.Helper()
	return f.eventsOf("playground", reason, want)
}

// eventsOf lists the Events with reason about the object named name,
// waiting up to 10 s for at least want.
func (f *fixture) eventsOf(name, reason string, want int) []corev1.Event {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var list corev1.EventList
		if err := env.Client.List(f.ctx, &list, client.InNamespace(f.ns)); err != nil {
			f.t.Fatal(err)
		}
		var out []corev1.Event
		for _, e := range list.Items {
			if e.Reason == reason && e.InvolvedObject.Name == name {
				out = append(out, e)
			}
		}
		if len(out) >= want || time.Now().After(deadline) {
			return out
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (f *fixture) deferredCount(op bloodravenv1alpha1.OperationName) float64 {
	return testutil.ToFloat64(f.metrics.Deferred.WithLabelValues(f.ns, "playground", string(op)))
}

func mustContain(t *testing.T, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%q lacks %q", s, sub)
		}
	}
}

var _ = fmt.Sprintf

func reqFor(f *fixture) ctrl.Request {
	return ctrl.Request{NamespacedName: client.ObjectKeyFromObject(f.group)}
}

// testRecordKey authenticates the records of every store of these tests
// (one key, as one operator has).
var testRecordKey = func() *leasestore.RecordKey {
	k, err := leasestore.NewRecordKey([]byte("bloodraven controllers test record key, 32+ bytes"), time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		panic(err)
	}
	return k
}()

// roomyShare is the deployment API's fair share in these tests: their fake
// clock stands still, so a token bucket would never refill; every request
// is one identity's. The share's own behaviour is tested in deployapi.
var roomyShare = deployapi.FairShare{Rate: 1e9, Burst: 1 << 30, InFlight: 1 << 12, HeldGets: 1 << 12}

// intercepted is a client of the test API server whose calls go through
// funcs (interceptor: a real client, not the fake one), for staging a race
// between two of its calls.
func intercepted(t *testing.T, funcs interceptor.Funcs) client.WithWatch {
	t.Helper()
	base, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return interceptor.NewClient(base, funcs)
}
