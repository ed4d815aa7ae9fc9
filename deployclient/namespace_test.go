package deployclient

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// nsRequest is one request as the fake saw it: its route and its query.
type nsRequest struct {
	route string // "GET group", "POST migration", "PUT migration phase=ddl", "GET failover-hold" (the watch), ...
	query string
	// named is the namespace the answer named ("" when none, or not 2xx).
	named string
}

// nsAPI answers every route of the deployment API for one operation, each
// answer naming namespace(route) (empty: none, as an older operator).
type nsAPI struct {
	// namespace is what an answer to route names.
	namespace func(route string) string
	// observeFails answers the observation 503.
	observeFails bool

	mu   sync.Mutex
	reqs []nsRequest
}

func (a *nsAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var in struct {
		Kind  string `json:"kind"`
		Phase string `json:"phase"`
	}
	_ = json.Unmarshal(body, &in)
	kind := in.Kind
	switch {
	case strings.Contains(r.URL.Path, "/leases/migration/"):
		kind = KindMigration
	case strings.Contains(r.URL.Path, "/leases/failover-hold/"):
		kind = KindFailoverHold
	}
	route := r.Method + " " + kind
	if r.URL.Path == "/deploy/v1/groups/g" {
		route = "GET group"
	}
	if in.Phase != "" {
		route += " phase=" + in.Phase
	}
	ns := ""
	if a.namespace != nil {
		ns = a.namespace(route)
	}
	w.Header().Set("Content-Type", "application/json")
	answer := map[string]any{"kind": kind, "operationId": "op", "instance": "db", "expiresAt": "2026-12-01T00:00:30Z", "topologyGeneration": 1, "ttlSeconds": 30}
	status := http.StatusOK
	switch {
	case route == "GET group" && a.observeFails:
		ns, status = "", http.StatusServiceUnavailable
		answer = map[string]any{"error": "unavailable"}
	case route == "GET group":
		answer = map[string]any{"group": "g", "topologyGeneration": 1, "leases": []any{}}
	case r.Method == http.MethodPost:
		status = http.StatusCreated
		answer["token"] = "lease-token-" + kind
	case r.Method == http.MethodPut && in.Phase != "":
		answer["phase"] = in.Phase
	case r.Method == http.MethodDelete:
		ns, status, answer = "", http.StatusNoContent, nil
	}
	if ns != "" {
		answer["namespace"] = ns
	}
	a.mu.Lock()
	a.reqs = append(a.reqs, nsRequest{route: route, query: r.URL.RawQuery, named: ns})
	a.mu.Unlock()
	w.WriteHeader(status)
	if answer != nil {
		_ = json.NewEncoder(w).Encode(answer)
	}
}

func (a *nsAPI) requests() []nsRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]nsRequest(nil), a.reqs...)
}

// seen reports whether a request whose route starts with prefix came.
func (a *nsAPI) seen(prefix string) bool {
	for _, r := range a.requests() {
		if strings.HasPrefix(r.route, prefix) {
			return true
		}
	}
	return false
}

// nsSession is a session's configuration against api, its client pinned
// to namespace (empty: none given).
func nsSession(t *testing.T, api *nsAPI, clk Clock, namespace string) SessionConfig {
	t.Helper()
	srv := httptest.NewUnstartedServer(api)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // a dial the transport raced and the close cut short
	srv.StartTLS()
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("bearer"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Server: srv.URL, CAFile: ca, TokenFile: tok, Namespace: namespace})
	if err != nil {
		t.Fatal(err)
	}
	return SessionConfig{Client: c, Group: "g", Instance: "db", OperationID: "op", TTL: 30 * time.Second, Clock: clk}
}

// everyRoute drives a session through every route a run uses: the
// observation, both grants, a watch GET of each lease, a heartbeat renewal
// of each, the DDL mark, the confirming renewal and both releases.
func everyRoute(t *testing.T, api *nsAPI, cfg SessionConfig, clk *fakeClock) *Session {
	t.Helper()
	s, err := Acquire(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	waitFor(t, "a watch GET of each lease", func() bool { return api.seen("GET migration") && api.seen("GET failover-hold") })
	clk.Step(10 * time.Second) // a renewal interval of a 30 s lease
	waitFor(t, "a heartbeat renewal of each lease", func() bool { return api.seen("PUT migration") && api.seen("PUT failover-hold") })
	if err := s.MarkDDL(context.Background()); err != nil {
		t.Fatalf("MarkDDL: %v", err)
	}
	if err := s.Confirm(context.Background(), true); err != nil {
		t.Fatalf("Confirm: %v", err)
	}
	if err := s.Release(context.Background(), nil); err != nil {
		t.Fatalf("Release: %v", err)
	}
	return s
}

// The routes every run must send with the pinned namespace.
var everyRouteOfARun = []string{
	"GET group", "POST migration", "POST failover-hold",
	"GET migration", "GET failover-hold", // the watch
	"PUT migration", "PUT failover-hold", // the heartbeat
	"PUT migration phase=ddl", "PUT migration phase=done", // MarkDDL, Confirm
	"DELETE failover-hold", "DELETE migration",
}

func assertEveryRouteSeen(t *testing.T, reqs []nsRequest) {
	t.Helper()
	for _, want := range everyRouteOfARun {
		found := false
		for _, r := range reqs {
			found = found || r.route == want
		}
		if !found {
			t.Errorf("no %s request was sent: %v", want, reqs)
		}
	}
}

// With Config.Namespace, every request of the session names it: the
// observation, the grants, the watch, the renewals, the DDL mark, the
// confirming renewal and the releases; also against an operator whose
// answers name none.
func TestEveryRequestNamesTheGivenNamespace(t *testing.T) {
	for name, answered := range map[string]string{
		"answers name the same namespace": "team-a",
		"answers name none (older)":       "",
	} {
		t.Run(name, func(t *testing.T) {
			clk := newFakeClock()
			api := &nsAPI{namespace: func(string) string { return answered }}
			s := everyRoute(t, api, nsSession(t, api, clk, "team-a"), clk)
			reqs := api.requests()
			assertEveryRouteSeen(t, reqs)
			for _, r := range reqs {
				if r.query != "namespace=team-a" {
					t.Errorf("%s was sent with query %q, want namespace=team-a", r.route, r.query)
				}
			}
			if s.Namespace() != "team-a" {
				t.Errorf("Namespace() = %q", s.Namespace())
			}
		})
	}
}

// Without a namespace given, the session's requests name none until an
// answer names one; every request sent after that answer names it.
func TestTheNamespaceIsLearnedFromTheFirstAnswerThatNamesOne(t *testing.T) {
	all := everyRouteOfARun
	for name, tc := range map[string]struct {
		observeFails bool
		named        func(route string) string
		// bare routes are sent naming no namespace (every time), named
		// ones with namespace=team-a (every time). The renewals and the
		// watch of the two leases run concurrently: a request of one
		// lease may be sent before the other lease's answer pinned.
		bare, pinned []string
		want         string
	}{
		"the observation names it": {
			named: func(string) string { return "team-a" },
			bare:  all[:1], pinned: all[1:], want: "team-a",
		},
		"the observation fails, the migration grant names it": {
			observeFails: true, named: func(string) string { return "team-a" },
			bare: all[:2], pinned: all[2:], want: "team-a",
		},
		"only the renewals name it": {
			named: func(route string) string {
				if strings.HasPrefix(route, "PUT ") {
					return "team-a"
				}
				return ""
			},
			bare:   []string{"GET group", "POST migration", "POST failover-hold"},
			pinned: []string{"PUT migration phase=ddl", "PUT migration phase=done", "DELETE failover-hold", "DELETE migration"},
			want:   "team-a",
		},
		"no answer names one (an older operator)": {
			named: func(string) string { return "" },
			bare:  all,
		},
	} {
		t.Run(name, func(t *testing.T) {
			clk := newFakeClock()
			api := &nsAPI{namespace: tc.named, observeFails: tc.observeFails}
			cfg := nsSession(t, api, clk, "")
			s := everyRoute(t, api, cfg, clk)
			reqs := api.requests()
			assertEveryRouteSeen(t, reqs)
			if reqs[0].route != "GET group" || reqs[0].query != "" {
				t.Fatalf("the first request is %s with query %q, want the observation naming no namespace", reqs[0].route, reqs[0].query)
			}
			for _, r := range reqs {
				for _, route := range tc.bare {
					if r.route == route && r.query != "" {
						t.Errorf("%s was sent with query %q before any answer named a namespace", r.route, r.query)
					}
				}
				for _, route := range tc.pinned {
					if r.route == route && r.query != "namespace=team-a" {
						t.Errorf("%s was sent with query %q after an answer named team-a, want namespace=team-a", r.route, r.query)
					}
				}
			}
			if s.Namespace() != tc.want {
				t.Errorf("Namespace() = %q, want %q", s.Namespace(), tc.want)
			}
		})
	}
}

// Once the namespace is pinned (given, or learned from the observation), an
// answer that names another one ends the session as a loss, whichever
// route answered it, and nothing follows it to the other namespace: the
// releases still name the pinned one.
func TestAnAnswerForAnotherNamespaceAfterPinningIsALoss(t *testing.T) {
	type when int
	const (
		acquiring when = iota // the answer comes during Acquire
		running               // after Acquire returned
	)
	cases := []struct {
		name  string
		route string // the route whose answer names team-b
		when  when
		// trigger sends the request, once armed (running only).
		trigger func(s *Session, clk *fakeClock) error
		// learned: also run with no namespace given (the observation pins).
		learned bool
	}{
		{name: "the observation", route: "GET group", when: acquiring},
		{name: "the migration grant", route: "POST migration", when: acquiring, learned: true},
		{name: "the hold's grant", route: "POST failover-hold", when: acquiring, learned: true},
		{name: "the heartbeat's renewal", route: "PUT failover-hold", when: running, learned: true,
			trigger: func(_ *Session, clk *fakeClock) error { clk.Step(10 * time.Second); return nil }},
		{name: "the watch", route: "GET migration", when: running, learned: true,
			trigger: func(_ *Session, clk *fakeClock) error { clk.Step(time.Second); return nil }},
		{name: "the DDL mark", route: "PUT migration phase=ddl", when: running, learned: true,
			trigger: func(s *Session, _ *fakeClock) error { return s.MarkDDL(context.Background()) }},
		{name: "the confirming renewal", route: "PUT migration phase=done", when: running, learned: true,
			trigger: func(s *Session, _ *fakeClock) error { return s.Confirm(context.Background(), true) }},
	}
	for _, tc := range cases {
		for _, given := range []bool{true, false} {
			if !given && !tc.learned {
				continue // the observation's namespace is the one learned
			}
			name := tc.name + ", namespace given"
			if !given {
				name = tc.name + ", namespace learned"
			}
			t.Run(name, func(t *testing.T) {
				clk := newFakeClock()
				var armed atomic.Bool
				armed.Store(tc.when == acquiring)
				api := &nsAPI{namespace: func(route string) string {
					if route == tc.route && armed.Load() {
						return "team-b"
					}
					return "team-a"
				}}
				ns := ""
				if given {
					ns = "team-a"
				}
				s, err := Acquire(context.Background(), nsSession(t, api, clk, ns))
				var ne *NamespaceError
				var acq *AcquireError
				if tc.when == acquiring {
					if err == nil || !errors.As(err, &ne) || !errors.As(err, &acq) || !acq.Permanent() {
						t.Fatalf("Acquire = %v, want a permanent AcquireError for another namespace", err)
					}
					if ne.Pinned != "team-a" || ne.Answered != "team-b" {
						t.Fatalf("NamespaceError %+v, want pinned team-a, answered team-b", ne)
					}
				} else {
					if err != nil {
						t.Fatalf("Acquire: %v", err)
					}
					waitFor(t, "a watch GET of each lease", func() bool { return api.seen("GET migration") && api.seen("GET failover-hold") })
					armed.Store(true)
					_ = tc.trigger(s, clk)
					select {
					case <-s.Lost():
					case <-time.After(5 * time.Second):
						t.Fatalf("the session was not lost after %s named another namespace", tc.route)
					}
					var lost *LostError
					if !errors.As(s.Err(), &lost) || lost.Cause != CauseNamespaceMismatch || !errors.As(lost, &ne) || ne.Answered != "team-b" || ne.Pinned != "team-a" {
						t.Fatalf("Err() = %v, want a loss for namespace team-b against team-a", s.Err())
					}
					if err := s.Confirm(context.Background(), true); err == nil {
						t.Fatal("Confirm succeeded after the loss: the run would call itself successful")
					}
					_ = s.Release(context.Background(), nil)
					if s.Namespace() != "team-a" {
						t.Fatalf("the session re-pinned to %q", s.Namespace())
					}
				}
				sawDelete := false
				for i, r := range api.requests() {
					if i == 0 && !given {
						continue // the observation, before anything was pinned
					}
					if r.query != "namespace=team-a" {
						t.Errorf("%s was sent with query %q after the namespace was pinned to team-a", r.route, r.query)
					}
					sawDelete = sawDelete || strings.HasPrefix(r.route, "DELETE migration")
					if tc.route == "GET group" && r.route != "GET group" {
						t.Errorf("%s was sent after the observation named another namespace", r.route)
					}
				}
				if tc.route == "POST failover-hold" && !sawDelete {
					t.Error("the migration lease was not released after the hold's grant named another namespace")
				}
			})
		}
	}
}

// A namespace must be a Kubernetes namespace name.
func TestANamespaceMustBeAKubernetesName(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("bearer"), 0o600); err != nil {
		t.Fatal(err)
	}
	for ns, ok := range map[string]bool{
		"team-a": true, "a": true, "0x": true, strings.Repeat("a", 63): true,
		strings.Repeat("a", 64): false, "Team-A": false, "-a": false, "a-": false, "a.b": false, "a&namespace=b": false,
	} {
		_, err := New(Config{Server: "https://bloodraven.example:8443", TokenFile: tok, Namespace: ns})
		if (err == nil) != ok {
			t.Errorf("New(Namespace %q) = %v, want ok %v", ns, err, ok)
		}
	}
}
