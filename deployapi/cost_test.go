package deployapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/store"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// requestLog counts API-server requests by verb and path.
type requestLog struct {
	mu   sync.Mutex
	reqs []string
}

func (l *requestLog) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			l.mu.Lock()
			l.reqs = append(l.reqs, req.Method+" "+req.URL.Path)
			l.mu.Unlock()
			return rt.RoundTrip(req)
		})
	})
	return cfg
}

func (l *requestLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.reqs
	l.reqs = nil
	return out
}

// countingServer is an API whose every API-server request is logged.
func (f *fixture) countingServer(t testing.TB, log *requestLog) *Server {
	cfg := log.wrap(env.Config)
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{IsLeader: func() bool { return true }, Clock: f.clock, Kube: kube, API: c, Databases: leaseCache,
		Leases: &leasestore.Store{Client: c, Cached: leaseCache, API: c, Clock: f.clock, Key: testRecordKey}, Log: f.srv.log, Groups: leaseCache, Informers: leaseCache, FairShare: roomyShare})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// docs/leases.md's cost budget: a steady renewal costs one uncached read for
// authorization (a GET of the database by name, never a LIST), the fence read and one Lease write with the cached
// resourceVersion — the TokenReview is amortized by the cache, and there is
// no GET of the Lease before the write.
func TestSteadyRenewalCostsThreeAPIRequests(t *testing.T) {
	f := newFixture(t)
	log := &requestLog{}
	s := f.countingServer(t, log)
	g := f.doWith(s, http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", "op-1", 30))
	if g.status != http.StatusCreated {
		t.Fatalf("grant: %d %s", g.status, g.raw)
	}
	// Let the cache see the grant, then renew once to warm the token cache.
	waitCached(t, f, leases.MigrationName("playground"), g)
	f.doWith(s, http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": g.str("token")})
	waitCacheCurrent(t, f, leases.MigrationName("playground"))
	log.take()

	r := f.doWith(s, http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": g.str("token")})
	if r.status != http.StatusOK {
		t.Fatalf("renew: %d %s", r.status, r.raw)
	}
	reqs := log.take()
	var dbGets, groupGets, leaseWrites, other int
	for _, q := range reqs {
		switch {
		case strings.HasPrefix(q, "GET ") && strings.HasSuffix(q, "/mysqldatabases/counter-app"):
			dbGets++
		case strings.HasPrefix(q, "GET ") && strings.Contains(q, "/mysqlfailovergroups/"):
			groupGets++
		case strings.HasPrefix(q, "PUT ") && strings.Contains(q, "/leases/"):
			leaseWrites++
		default:
			other++
		}
	}
	if dbGets != 1 || groupGets != 1 || leaseWrites != 1 || other != 0 {
		t.Fatalf("a steady renewal made %d requests %v; want 1 database read by name, 1 group read, 1 lease write", len(reqs), reqs)
	}
}

// The observation (GET of a group) grants nothing and lists the leases from
// the cache, so its group comes from the cache too: it costs the API server
// only the uncached database read that authorizes it. This is what an
// authorized flood of observations costs everyone else (issue 35's flood
// e2e): one read per answered GET, not two.
func TestAnObservationCostsOneAPIRequest(t *testing.T) {
	f := newFixture(t)
	log := &requestLog{}
	s := f.countingServer(t, log)
	if r := f.doWith(s, http.MethodGet, groupPath, f.token, nil); r.status != http.StatusOK { // warms the token cache
		t.Fatalf("observe: %d %s", r.status, r.raw)
	}
	log.take()
	r := f.doWith(s, http.MethodGet, groupPath, f.token, nil)
	if r.status != http.StatusOK || r.str("group") != "playground" {
		t.Fatalf("observe: %d %s", r.status, r.raw)
	}
	reqs := log.take()
	dbGets := 0
	for _, q := range reqs {
		if strings.HasPrefix(q, "GET ") && strings.HasSuffix(q, "/mysqldatabases/counter-app") {
			dbGets++
		}
	}
	if dbGets != 1 || len(reqs) != 1 {
		t.Fatalf("an observation made %d requests %v; want only 1 database read by name", len(reqs), reqs)
	}
}

// waitCacheCurrent waits until the lease cache holds the stored
// resourceVersion of a Lease, so the next write carries a current one.
func waitCacheCurrent(t testing.TB, f *fixture, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		stored, err1 := f.store.Get(f.ctx, f.groupNS, name, true)
		cached, err2 := f.store.Get(f.ctx, f.groupNS, name, false)
		if err1 == nil && err2 == nil && stored != nil && cached != nil && stored.Lease.ResourceVersion == cached.Lease.ResourceVersion {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("lease cache never caught up")
}

// waitCached waits until the lease cache holds the lease as granted.
func waitCached(t testing.TB, f *fixture, name string, g response) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		o, err := f.store.Get(f.ctx, f.groupNS, name, false)
		if err == nil && o != nil && leases.TokenMatches(g.str("token"), o.Record.TokenHash) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("lease cache never saw the grant")
}

func TestAPIServerFailuresAreServiceUnavailable(t *testing.T) {
	refused := &url.Error{Op: "Put", URL: "https://127.0.0.1:6443/apis/coordination.k8s.io/v1/namespaces/ns/leases/x",
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	for _, tc := range []struct {
		name   string
		err    error
		status int
		code   string
		retry  int
	}{
		{"throttled (429)", apierrors.NewTooManyRequests("slow down", 3), 503, "unavailable", 3},
		{"the API server failed (500)", apierrors.NewInternalError(errors.New("etcd down")), 503, "unavailable", 1},
		{"the API server is unavailable (503)", apierrors.NewServiceUnavailable("etcd down"), 503, "unavailable", 1},
		{"the API server timed out", apierrors.NewTimeoutError("etcd slow", 2), 503, "unavailable", 2},
		{"connection refused", fmt.Errorf("get group: %w", refused), 503, "unavailable", 1},
		{"connection reset", fmt.Errorf("put lease: %w", syscall.ECONNRESET), 503, "unavailable", 1},
		{"no answer in time", fmt.Errorf("get group: %w", context.DeadlineExceeded), 503, "unavailable", 1},
		{"contended", store.ErrContended, 503, "unavailable", 1},
		{"the operator's own request forbidden (RBAC not yet in force after a restart)", fmt.Errorf("token review: %w",
			apierrors.NewForbidden(schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}, "", errors.New("RBAC: not found"))), 503, "unavailable", 1},
		{"the operator's credentials refused", apierrors.NewUnauthorized("token expired"), 503, "unavailable", 1},
		{"our own failure", errors.New("boom"), 500, "internal", 0},
		{"a refused object (422)", apierrors.NewInvalid(schema.GroupKind{Group: "coordination.k8s.io", Kind: "Lease"}, "x", nil), 500, "internal", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := errFromAPIServer(tc.err)
			if e.status != tc.status || e.code != tc.code || e.retryAfter != tc.retry {
				t.Fatalf("maps to %d %s retry %d, want %d %s retry %d", e.status, e.code, e.retryAfter, tc.status, tc.code, tc.retry)
			}
		})
	}
	if e := errFromAPIServer(errForbidden); e != errForbidden {
		t.Fatal("typed errors pass through")
	}
}

// BenchmarkRenewal measures steady renewals through the handler against the
// real API server: TokenReview cached, fresh authorization and fence reads,
// one preconditioned Lease write each. Reported as renewals/s.
func BenchmarkRenewal(b *testing.B) {
	f := newFixture(b)
	g := f.grant("migration", "bench", http.StatusCreated)
	waitCached(b, f, leases.MigrationName("playground"), g)
	body := map[string]any{"token": g.str("token"), "ttlSeconds": 120}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if r := f.do(http.MethodPut, leasePath("migration", "bench"), f.token, body); r.status != http.StatusOK {
			b.Fatalf("renew %d: %d %s", i, r.status, r.raw)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "renewals/s")
}
