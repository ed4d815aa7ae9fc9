package deployapi

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/scene"
	"github.com/shipstream/bloodraven/internal/testenv"
	"github.com/shipstream/bloodraven/leases"
)

// watchLease sends the lease GET, held for wait seconds when wait > 0, over
// real TLS: the server's handler behind an httptest TLS listener.
// waitHeld waits until s holds n lease GETs: the request was authorized,
// answered 200 at first, and now waits.
func (f *fixture) waitHeld(s *Server, n int64) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.holding.Load() < n {
		if time.Now().After(deadline) {
			f.t.Fatalf("%d lease GETs held, want %d", s.holding.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (f *fixture) watchLease(s *Server, kind, op, token string, wait int) response {
	f.t.Helper()
	h := []string{"X-Lease-Token", token}
	if wait > 0 {
		h = append(h, "Prefer", "wait="+strconv.Itoa(wait))
	}
	f.mu.Lock()
	if f.tls == nil {
		f.tls = map[*Server]*httptest.Server{}
	}
	ts := f.tls[s]
	if ts == nil {
		ts = httptest.NewTLSServer(s.Handler())
		f.tls[s] = ts
		f.t.Cleanup(ts.Close)
	}
	f.mu.Unlock()
	r, err := scene.ForURL(ts.URL, ts.Client(), f.token).Send(http.MethodGet, leasePath(kind, op), nil, h...)
	if err != nil {
		f.t.Fatal(err)
	}
	return response{status: r.Status, header: r.Header, raw: r.Raw, body: r.Body}
}

// The lease GET answers as a renewal would, and renews nothing.
func TestLeaseGetAnswersTheLeaseWithoutRenewing(t *testing.T) {
	f := newFixture(t)
	g := f.grant("migration", "op-get", http.StatusCreated)
	tok := g.str("token")
	waitCached(t, f, leases.MigrationName("playground"), g)
	f.clock.Step(2 * time.Second)
	r := f.watchLease(f.srv, "migration", "op-get", tok, 0)
	if r.status != http.StatusOK || r.str("expiresAt") != g.str("expiresAt") || r.str("phase") != "pre-ddl" || r.num("topologyGeneration") != 1 {
		t.Fatalf("GET: %d %s; want 200 with the grant's expiresAt %s", r.status, r.raw, g.str("expiresAt"))
	}
	obj, err := f.store.Get(f.ctx, f.groupNS, leases.MigrationName("playground"), true)
	if err != nil || !obj.Record.RenewedAt.Equal(obj.Record.GrantedAt) {
		t.Fatalf("the GET renewed the lease: %+v %v", obj, err)
	}
	expectError(t, f.watchLease(f.srv, "migration", "op-get", "wrong", 0), http.StatusForbidden, "token_mismatch")
	expectError(t, f.watchLease(f.srv, "migration", "op-unknown", tok, 0), http.StatusNotFound, "not_found")
	expectError(t, f.watchLease(f.srv, "failover-hold", "op-get", tok, 0), http.StatusNotFound, "not_found")
}

// A held lease GET answers within a second of each way the lease stops
// being the caller's, and a wait that ends answers the lease as it stands.
func TestHeldLeaseGetAnswersWithinASecondOfTheEnd(t *testing.T) {
	cases := []struct {
		name       string
		kind       string
		end        func(f *fixture, tok string)
		status     int
		code       string
		wantReason string
	}{
		{name: "new generation", kind: "migration", status: http.StatusConflict, code: "revoked", wantReason: "topology_changed",
			end: func(f *fixture, _ string) {
				f.setStatus(func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) { s.TopologyGeneration++ })
			}},
		{name: "revocation", kind: "migration", status: http.StatusConflict, code: "revoked", wantReason: "operator_revoked",
			end: func(f *fixture, _ string) {
				if _, err := f.store.Revoke(f.ctx, f.group, "op-w", leases.ReasonOperatorRevoked); err != nil {
					f.t.Fatal(err)
				}
			}},
		{name: "re-grant with another token", kind: "migration", status: http.StatusForbidden, code: "token_mismatch",
			end: func(f *fixture, _ string) { f.grant("migration", "op-w", http.StatusOK) }},
		{name: "release", kind: "migration", status: http.StatusNotFound, code: "not_found",
			end: func(f *fixture, tok string) {
				if r := f.do(http.MethodDelete, leasePath("migration", "op-w"), f.token, nil, "X-Lease-Token", tok); r.status != http.StatusNoContent {
					f.t.Fatalf("release: %d %s", r.status, r.raw)
				}
			}},
		{name: "expiry", kind: "migration", status: http.StatusNotFound, code: "not_found",
			end: func(f *fixture, _ string) { f.clock.Step(31 * time.Second) }},
		{name: "hold: its mutex released", kind: "failover-hold", status: http.StatusNotFound, code: "not_found",
			end: func(f *fixture, _ string) {
				obj, err := f.store.Get(f.ctx, f.groupNS, leases.MigrationName("playground"), true)
				if err != nil {
					f.t.Fatal(err)
				}
				if _, err := f.store.Update(f.ctx, f.group, obj, obj.Record.Released(f.clock.Now())); err != nil {
					f.t.Fatal(err)
				}
			}},
		{name: "hold: its mutex revoked", kind: "failover-hold", status: http.StatusConflict, code: "revoked", wantReason: "topology_changed",
			end: func(f *fixture, _ string) {
				f.setStatus(func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) { s.TopologyGeneration++ })
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			m := f.grant("migration", "op-w", http.StatusCreated)
			tok := m.str("token")
			if tc.kind == "failover-hold" {
				waitCached(t, f, leases.MigrationName("playground"), m)
				h := f.grant("failover-hold", "op-w", http.StatusCreated)
				tok = h.str("token")
				waitCached(t, f, leases.LeaseName(leases.KindFailoverHold, "playground", "op-w"), h)
			} else {
				waitCached(t, f, leases.MigrationName("playground"), m)
			}
			answered := make(chan response, 1)
			go func() { answered <- f.watchLease(f.srv, tc.kind, "op-w", tok, 30) }()
			f.waitHeld(f.srv, 1)
			select {
			case r := <-answered:
				t.Fatalf("answered before the end: %d %s", r.status, r.raw)
			case <-time.After(300 * time.Millisecond): // a few looks at the caches
			}
			ended := time.Now()
			tc.end(f, m.str("token"))
			var r response
			select {
			case r = <-answered:
			case <-time.After(5 * time.Second):
				t.Fatal("no answer 5 s after the end")
			}
			took := time.Since(ended)
			expectError(t, r, tc.status, tc.code)
			if tc.wantReason != "" && r.str("reason") != tc.wantReason {
				t.Fatalf("reason %q, want %q: %s", r.str("reason"), tc.wantReason, r.raw)
			}
			if took > time.Second {
				t.Fatalf("answered %s after the end, want within 1 s", took)
			}
			t.Logf("answered %s after the end", took.Round(time.Millisecond))
		})
	}
}

// A held lease GET answers 503 not_leader, with Connection: close, once its
// replica stops leading; and the wait's end answers the lease.
func TestHeldLeaseGetEndsWithLeadershipAndWithItsWait(t *testing.T) {
	f := newFixture(t)
	g := f.grant("migration", "op-l", http.StatusCreated)
	waitCached(t, f, leases.MigrationName("playground"), g)
	answered := make(chan response, 1)
	go func() { answered <- f.watchLease(f.srv, "migration", "op-l", g.str("token"), 30) }()
	f.waitHeld(f.srv, 1)
	f.leader.Store(false)
	select {
	case r := <-answered:
		expectError(t, r, http.StatusServiceUnavailable, "not_leader")
		// The header as the handler wrote it (a client consumes it: the
		// connection is closed, and Go's drops the header).
		direct := f.do(http.MethodGet, leasePath("migration", "op-l"), f.token, nil, "X-Lease-Token", g.str("token"))
		if direct.header.Get("Connection") != "close" {
			t.Fatalf("not_leader without Connection: close: %v", direct.header)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a held request outlived its replica's leadership")
	}
	f.leader.Store(true)

	go func() { answered <- f.watchLease(f.srv, "migration", "op-l", g.str("token"), 2) }()
	f.waitHeld(f.srv, 1)
	f.clock.Step(2 * time.Second) // the wait is measured on the server's clock
	select {
	case r := <-answered:
		if r.status != http.StatusOK || r.str("operationId") != "op-l" {
			t.Fatalf("the wait ended with %d %s, want 200 and the lease", r.status, r.raw)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the wait did not end")
	}
}

// A stopping operator (Drain, on SIGTERM) answers its held lease GETs at
// once with the lease as it stands, and holds no new one: a held GET would
// keep the listener, and the leader Lease with it, for its whole wait,
// while the Service already routes to no one (the node suite's leader
// deletion lost a 30-s lease that way).
func TestDrainAnswersHeldLeaseGetsAtOnce(t *testing.T) {
	f := newFixture(t)
	g := f.grant("migration", "op-d", http.StatusCreated)
	waitCached(t, f, leases.MigrationName("playground"), g)
	answered := make(chan response, 2)
	go func() { answered <- f.watchLease(f.srv, "migration", "op-d", g.str("token"), 30) }()
	f.waitHeld(f.srv, 1)
	f.srv.Drain()
	f.srv.Drain() // idempotent
	select {
	case r := <-answered:
		if r.status != http.StatusOK || r.str("operationId") != "op-d" {
			t.Fatalf("a held GET ended with %d %s on Drain, want 200 and the lease", r.status, r.raw)
		}
	case <-time.After(2 * time.Second):
		f.clock.Step(31 * time.Second) // end the wait, or the listener's Close waits on it
		t.Fatal("a held GET outlived Drain")
	}
	start := time.Now()
	r := f.watchLease(f.srv, "migration", "op-d", g.str("token"), 30)
	if r.status != http.StatusOK || time.Since(start) > 2*time.Second {
		t.Fatalf("a GET after Drain: %d after %s, want 200 at once", r.status, time.Since(start))
	}
}

// A held lease GET costs the API server nothing while it waits: no request
// from the API's clients (counted at the client), and no change in the API
// server's own apiserver_request_total for the resources the API reads.
func TestHeldLeaseGetCostsTheAPIServerNothingWhileItWaits(t *testing.T) {
	f := newFixture(t)
	log := &requestLog{}
	s := f.countingServer(t, log)
	g := f.grant("migration", "op-c", http.StatusCreated)
	waitCached(t, f, leases.MigrationName("playground"), g)
	answered := make(chan response, 1)
	go func() { answered <- f.watchLease(s, "migration", "op-c", g.str("token"), 30) }()
	f.waitHeld(s, 1) // authentication, authorization and the first answer are done
	log.take()
	before := apiserverRequests(t)
	time.Sleep(3 * time.Second)
	after := apiserverRequests(t)
	if reqs := log.take(); len(reqs) != 0 {
		t.Fatalf("a held request made %d API-server requests while it waited: %v", len(reqs), reqs)
	}
	for _, res := range []string{"mysqlfailovergroups", "mysqldatabases", "tokenreviews"} {
		if d := after[res] - before[res]; d != 0 {
			t.Fatalf("apiserver_request_total{resource=%q} grew by %v while a request was held", res, d)
		}
	}
	t.Logf("API-server requests while held for 3 s: 0 (client side); apiserver_request_total delta 0 for groups, databases, tokenreviews")
	f.setStatus(func(st *bloodravenv1alpha1.MysqlFailoverGroupStatus) { st.TopologyGeneration++ })
	select {
	case r := <-answered:
		expectError(t, r, http.StatusConflict, "revoked")
	case <-time.After(3 * time.Second):
		t.Fatal("no answer after the move")
	}
}

// apiserverRequests is apiserver_request_total by resource, WATCH requests
// (the informers' own) left out.
func apiserverRequests(t *testing.T) map[string]float64 {
	t.Helper()
	raw, err := env.Kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var keep strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "apiserver_request_total") || strings.HasPrefix(line, "# TYPE apiserver_request_total ") {
			keep.WriteString(line + "\n")
		}
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(keep.String()))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, m := range fams["apiserver_request_total"].GetMetric() {
		var res, verb string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "resource":
				res = l.GetValue()
			case "verb":
				verb = l.GetValue()
			}
		}
		if verb != "WATCH" {
			out[res] += m.GetCounter().GetValue()
		}
	}
	return out
}

// A migration renewal records its phase; phases only move forward; a phase
// is for the migration lease only.
func TestRenewalRecordsThePhaseForwardOnly(t *testing.T) {
	f := newFixture(t)
	m := f.grant("migration", "op-p", http.StatusCreated)
	tok := m.str("token")
	waitCached(t, f, leases.MigrationName("playground"), m)
	h := f.grant("failover-hold", "op-p", http.StatusCreated)
	put := func(kind, token string, phase any) response {
		body := map[string]any{"token": token}
		if phase != nil {
			body["phase"] = phase
		}
		return f.do(http.MethodPut, leasePath(kind, "op-p"), f.token, body)
	}
	stored := func() leases.Phase {
		obj, err := f.store.Get(f.ctx, f.groupNS, leases.MigrationName("playground"), true)
		if err != nil {
			t.Fatal(err)
		}
		return obj.Record.Phase
	}
	for _, step := range []struct {
		send any
		want leases.Phase
	}{
		{nil, ""}, {"pre-ddl", leases.PhasePreDDL}, {"ddl", leases.PhaseDDL}, {"pre-ddl", leases.PhaseDDL}, {nil, leases.PhaseDDL}, {"done", leases.PhaseDone}, {"ddl", leases.PhaseDone},
	} {
		r := put("migration", tok, step.send)
		if r.status != http.StatusOK {
			t.Fatalf("renew with phase %v: %d %s", step.send, r.status, r.raw)
		}
		if got := stored(); got != step.want {
			t.Fatalf("after phase %v the record says %q, want %q", step.send, got, step.want)
		}
		if r.str("phase") != string(step.want.Effective()) {
			t.Fatalf("after phase %v the answer says %q, want %q", step.send, r.str("phase"), step.want.Effective())
		}
		waitCacheCurrent(t, f, leases.MigrationName("playground"))
	}
	expectError(t, put("migration", tok, "DDL"), http.StatusBadRequest, "bad_request")
	expectError(t, put("migration", tok, 1), http.StatusBadRequest, "bad_request")
	expectError(t, put("failover-hold", h.str("token"), "ddl"), http.StatusBadRequest, "bad_request")
	if got := stored(); got != leases.PhaseDone {
		t.Fatalf("a refused renewal changed the phase to %q", got)
	}
	// A re-grant keeps the phase the operation reached.
	f.grant("migration", "op-p", http.StatusOK)
	if got := stored(); got != leases.PhaseDone {
		t.Fatalf("a re-grant reset the phase to %q", got)
	}
}

// A held answer outlives the listener's read timeout (the operator's TLS
// listener has 30 s, the longest wait is 60 s): the read deadline bounds
// reading the request, and net/http (Go 1.26) does not cancel a handler
// whose request was read when it passes. Served here by a real TLS server
// with a 1 s read timeout, a 3 s wait answers 200.
func TestAHeldLeaseGetOutlivesTheReadTimeout(t *testing.T) {
	f := newFixture(t)
	g := f.grant("migration", "op-rt", http.StatusCreated)
	waitCached(t, f, leases.MigrationName("playground"), g)
	srv := httptest.NewUnstartedServer(f.srv.Handler())
	srv.Config.ReadTimeout = time.Second
	srv.StartTLS()
	defer srv.Close()
	c := srv.Client()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+leasePath("migration", "op-rt"), nil)
	req.Header.Set("Authorization", "Bearer "+f.token)
	req.Header.Set("X-Lease-Token", g.str("token"))
	req.Header.Set("Prefer", "wait=3")
	go func() {
		f.waitHeld(f.srv, 1)
		time.Sleep(1500 * time.Millisecond) // held past the 1 s read timeout
		f.clock.Step(3 * time.Second)       // the wait ends on the server's clock
	}()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("a held GET past the read timeout answered %d %s, want 200", resp.StatusCode, b)
	}
}

// countingReader counts the Gets of the reader it wraps.
type countingReader struct {
	client.Reader
	gets atomic.Int64
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets.Add(1)
	return c.Reader.Get(ctx, key, obj, opts...)
}

// A held lease GET looks at the caches only when the informers report a
// change to its group or to one of its Leases (or its expiry passes):
// waiting, and another group's changes, cost it no read; a change of its
// own lease wakes it, and it goes on waiting while the lease is still the
// caller's.
func TestAHeldLeaseGetLooksAtTheCachesOnlyWhenItsGroupChanges(t *testing.T) {
	f := newFixture(t)
	groups := &countingReader{Reader: leaseCache}
	f.groups = groups
	s := f.newServer()
	g := f.grant("migration", "op-c", http.StatusCreated)
	waitCached(t, f, leases.MigrationName("playground"), g)
	answered := make(chan response, 1)
	go func() { answered <- f.watchLease(s, "migration", "op-c", g.str("token"), 30) }()
	f.waitHeld(s, 1)
	defer s.Drain() // the wait is on the server's clock, which stands still: end it before the listener closes
	held := func() {
		t.Helper()
		select {
		case r := <-answered:
			t.Fatalf("answered while the lease was the caller's: %d %s", r.status, r.raw)
		default:
		}
	}
	// quiet is the looks so far, after d with nothing to wake the GET: d
	// spans a few ticks (watchTick), each of which a poll would look on.
	quiet := func(d time.Duration) int64 {
		t.Helper()
		time.Sleep(d)
		held()
		return groups.gets.Load()
	}
	lookedAfter := func(n int64) {
		t.Helper()
		testenv.WaitFor(t, 5*time.Second, func() bool { return groups.gets.Load() > n })
		held()
	}
	lookedAfter(0)                // its first look, at its first tick
	first := quiet(3 * watchTick) // settled
	other := f.createGroup(f.groupNS, "other", 1)
	other.Status.TopologyGeneration++
	if err := env.Client.Status().Update(f.ctx, other); err != nil {
		t.Fatal(err)
	}
	waitObjectCached(t, other) // its events were delivered
	if n := quiet(3 * watchTick); n != first {
		t.Fatalf("%d looks over %d ticks and another group's changes, want none", n-first, 3)
	}
	f.clock.Step(time.Second) // a renewal at the same instant writes nothing
	if r := f.do(http.MethodPut, leasePath("migration", "op-c"), f.token, map[string]any{"token": g.str("token")}); r.status != http.StatusOK {
		t.Fatalf("renew: %d %s", r.status, r.raw)
	}
	lookedAfter(first) // the renewal woke it, and it goes on waiting
}
