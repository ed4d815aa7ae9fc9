package deployapi

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/scene"
	"github.com/shipstream/bloodraven/internal/testenv"
	"github.com/shipstream/bloodraven/store/leasestore"
)

var (
	env        *testenv.Env
	leaseCache cache.Cache
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, &env, func(e *testenv.Env) (func(), error) {
		c, err := cache.New(e.Config, cache.Options{Scheme: e.Scheme, ByObject: leasestore.CacheByObject()})
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		if err := IndexDatabases(ctx, c); err != nil {
			cancel()
			return nil, err
		}
		go func() { _ = c.Start(ctx) }()
		if !c.WaitForCacheSync(ctx) {
			cancel()
			return nil, fmt.Errorf("lease cache did not sync")
		}
		// Start the Lease informer now rather than on the first request.
		if err := c.List(ctx, &coordinationv1.LeaseList{}); err != nil {
			cancel()
			return nil, err
		}
		if err := c.List(ctx, &bloodravenv1alpha1.MysqlDatabaseList{}); err != nil {
			cancel()
			return nil, err
		}
		if err := c.List(ctx, &bloodravenv1alpha1.MysqlFailoverGroupList{}); err != nil {
			cancel()
			return nil, err
		}
		leaseCache = c
		return cancel, nil
	}))
}

// logBuffer captures log lines, safely across goroutines.
type logBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (b *logBuffer) add(s string) { b.mu.Lock(); b.lines = append(b.lines, s); b.mu.Unlock() }
func (b *logBuffer) all() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.lines...)
}

// fixture is one group with one database, a deploy ServiceAccount listed as
// its client, and an API server for it.
type fixture struct {
	t        testing.TB
	ctx      context.Context
	groupNS  string // namespace of group and database
	clientNS string // namespace of the deploy ServiceAccount
	group    *bloodravenv1alpha1.MysqlFailoverGroup
	token    string // bearer token of clientNS/deploy, audience bloodraven-deploy
	clock    *clocktesting.FakeClock
	leader   atomic.Bool
	srv      *Server
	logs     *logBuffer
	reg      *prometheus.Registry
	store    *leasestore.Store
	// leaseTokens collects every lease token handed out, for the leak checks.
	leaseTokens []string
	mu          sync.Mutex
	// unverified counts the records the store found unverified.
	unverified atomic.Int64
	// tls serves a Server's handler over real TLS (the lease GET tests).
	tls map[*Server]*httptest.Server
	// groups, when set, is the Groups reader of the servers newServer
	// builds next (the cache otherwise).
	groups client.Reader
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{t: t, ctx: context.Background(), clock: clocktesting.NewFakeClock(time.Now().UTC().Truncate(time.Microsecond)), logs: &logBuffer{}, reg: prometheus.NewRegistry()}
	f.groupNS = env.Namespace(t)
	f.clientNS = env.Namespace(t)
	f.group = f.createGroup(f.groupNS, "playground", 1)
	f.createDatabase(f.groupNS, "counter-app", "playground", bloodravenv1alpha1.DeploymentClient{Namespace: f.clientNS, ServiceAccount: "deploy"})
	f.token = f.serviceAccountToken(f.clientNS, "deploy", "bloodraven-deploy")
	f.leader.Store(true)
	f.srv = f.newServer()
	return f
}

func (f *fixture) newServer() *Server {
	f.t.Helper()
	f.store = &leasestore.Store{Client: env.Client, Cached: leaseCache, API: env.Client, Clock: f.clock, Key: testRecordKey,
		OnUnverified: func(string, string, string) { f.unverified.Add(1) }}
	reg := f.reg
	if f.srv != nil { // a second server (replica, restart) gets its own registry
		reg = prometheus.NewRegistry()
	}
	s, err := New(Config{
		IsLeader:  f.leader.Load,
		Clock:     f.clock,
		Kube:      env.Kube,
		API:       env.Client,
		Databases: leaseCache,
		Leases:    f.store,
		Log:       funcr.NewJSON(func(obj string) { f.logs.add(obj) }, funcr.Options{}),
		Metrics:   reg,
		Groups:    cmp.Or[client.Reader](f.groups, leaseCache),
		Informers: leaseCache,
		FairShare: roomyShare,
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

// roomyShare is the fair share of the servers of tests about other things:
// their clock stands still, so a bucket never refills. The fair share has
// its own tests (fairshare_test.go).
var roomyShare = FairShare{Rate: 1e6, Burst: 1e6, InFlight: 1e4, HeldGets: 1e4}

func (f *fixture) createGroup(ns, name string, generation int64) *bloodravenv1alpha1.MysqlFailoverGroup {
	f.t.Helper()
	g := scene.Group(ns, name)
	if err := env.Client.Create(f.ctx, g); err != nil {
		f.t.Fatal(err)
	}
	g.Status = bloodravenv1alpha1.MysqlFailoverGroupStatus{ActiveSite: "iad", TopologyGeneration: generation,
		Health: bloodravenv1alpha1.Health{Ready: true, ReplicationRunning: true, ReplicationLagSeconds: 0.4}}
	if err := env.Client.Status().Update(f.ctx, g); err != nil {
		f.t.Fatal(err)
	}
	waitObjectCached(f.t, g) // the group cache proposes the namespaces that count
	return g
}

// testRecordKey authenticates the records of every store of these tests
// (one key, as one operator has). Records without a MAC count as written
// before it only on Leases created before 2000.
var testRecordKey = func() *leasestore.RecordKey {
	k, err := leasestore.NewRecordKey([]byte("bloodraven deployapi test record key, 32+ bytes"), time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		panic(err)
	}
	return k
}()

func (f *fixture) createDatabase(ns, name, group string, clients ...bloodravenv1alpha1.DeploymentClient) {
	f.t.Helper()
	db := scene.Database(ns, name, group, clients...)
	if err := env.Client.Create(f.ctx, db); err != nil {
		f.t.Fatal(err)
	}
	waitDatabaseCached(f.t, db)
}

// revision reads a resourceVersion as the etcd revision it is on a real API
// server (opaque to clients in general; tests may rely on it).
func revision(rv string) uint64 {
	n, _ := strconv.ParseUint(rv, 10, 64)
	return n
}

// waitDatabaseCached waits until the cache that proposes authorization
// candidates holds db at its stored resourceVersion (or a later one).
func waitDatabaseCached(t testing.TB, db *bloodravenv1alpha1.MysqlDatabase) {
	t.Helper()
	waitObjectCached(t, db)
}

// waitObjectCached waits until the test cache (leases, databases, groups) holds
// want at its resourceVersion or a later one.
func waitObjectCached(t testing.TB, want client.Object) {
	t.Helper()
	got := want.DeepCopyObject().(client.Object)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		err := leaseCache.Get(context.Background(), client.ObjectKeyFromObject(want), got)
		if err == nil && revision(got.GetResourceVersion()) >= revision(want.GetResourceVersion()) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the cache never saw %T %s/%s at resourceVersion %s", want, want.GetNamespace(), want.GetName(), want.GetResourceVersion())
}

// serviceAccountToken creates the ServiceAccount if needed and returns a real
// TokenRequest token for audience.
func (f *fixture) serviceAccountToken(ns, name, audience string) string {
	f.t.Helper()
	token, err := scene.Token(f.ctx, env.Kube, ns, name, []string{audience}, time.Hour)
	if err != nil {
		f.t.Fatal(err)
	}
	return token
}

// setStatus changes the group's status as the operator would.
func (f *fixture) setStatus(mutate func(*bloodravenv1alpha1.MysqlFailoverGroupStatus)) {
	f.t.Helper()
	g := &bloodravenv1alpha1.MysqlFailoverGroup{}
	if err := env.Client.Get(f.ctx, client.ObjectKeyFromObject(f.group), g); err != nil {
		f.t.Fatal(err)
	}
	mutate(&g.Status)
	if err := env.Client.Status().Update(f.ctx, g); err != nil {
		f.t.Fatal(err)
	}
	f.group = g
}

type response struct {
	status int
	header http.Header
	raw    string
	body   map[string]any
}

func (r response) str(key string) string {
	v, _ := r.body[key].(string)
	return v
}

func (r response) num(key string) float64 {
	v, _ := r.body[key].(float64)
	return v
}

// do sends a request through the API's handler (no listener).
func (f *fixture) do(method, path, bearer string, body any, headers ...string) response {
	f.t.Helper()
	return f.doWith(f.srv, method, path, bearer, body, headers...)
}

func (f *fixture) doWith(s *Server, method, path, bearer string, body any, headers ...string) response {
	f.t.Helper()
	r, err := scene.ForHandler(s.Handler(), bearer).Send(method, path, body, headers...)
	if err != nil {
		f.t.Fatal(err)
	}
	out := response{status: r.Status, header: r.Header, raw: r.Raw, body: r.Body}
	if tok := out.str("token"); tok != "" {
		f.mu.Lock()
		f.leaseTokens = append(f.leaseTokens, tok)
		f.mu.Unlock()
	}
	return out
}

const groupPath = "/deploy/v1/groups/playground"

func leasePath(kind, op string) string { return groupPath + "/leases/" + kind + "/" + op }

func grantBody(kind, op string, ttl any) map[string]any {
	b := map[string]any{"kind": kind, "operationId": op, "instance": "counter-app"}
	if ttl != nil {
		b["ttlSeconds"] = ttl
	}
	return b
}

// grant takes a lease and fails the test unless the status is want.
func (f *fixture) grant(kind, op string, want int) response {
	f.t.Helper()
	r := f.do(http.MethodPost, groupPath+"/leases", f.token, grantBody(kind, op, 30))
	if r.status != want {
		f.t.Fatalf("POST %s %s: status %d, want %d: %s", kind, op, r.status, want, r.raw)
	}
	return r
}

func expectError(t testing.TB, r response, status int, code string) {
	t.Helper()
	if r.status != status || r.str("error") != code {
		t.Fatalf("got %d %s, want %d {\"error\":%q}", r.status, r.raw, status, code)
	}
}

// leaseObjects lists every Lease in the group's namespace (tombstones too).
func (f *fixture) leaseObjects() []coordinationv1.Lease {
	f.t.Helper()
	var list coordinationv1.LeaseList
	if err := env.Client.List(f.ctx, &list, client.InNamespace(f.groupNS)); err != nil {
		f.t.Fatal(err)
	}
	return list.Items
}
