package deploycmd

import (
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shipstream/bloodraven/deployclient"
)

// asCLI: the test binary, started with this variable set, is the CLI
// itself (the command of a run uses it for `mark-ddl`).
const asCLI = "DEPLOYCMD_TEST_AS_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(asCLI) == "1" {
		os.Exit(Run("bloodraven-deploy", os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
	}
	os.Exit(m.Run())
}

// cliRequest is one request the fake API saw.
type cliRequest struct{ route, query string }

// cliAPI is the deployment API for one run: every answer names namespace
// team-a. ambiguous answers 403 forbidden to every request that names no
// namespace, as the server does when the group's name is authorized in
// more than one namespace.
type cliAPI struct {
	ambiguous bool
	mu        sync.Mutex
	reqs      []cliRequest
}

func (a *cliAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var in struct{ Kind, Phase string }
	_ = json.Unmarshal(body, &in)
	kind := in.Kind
	if i := strings.Index(r.URL.Path, "/leases/"); i >= 0 {
		kind, _, _ = strings.Cut(r.URL.Path[i+len("/leases/"):], "/")
	}
	route := r.Method + " " + kind
	if !strings.Contains(r.URL.Path, "/leases") {
		route = "GET group"
	}
	if in.Phase != "" {
		route += " phase=" + in.Phase
	}
	a.mu.Lock()
	a.reqs = append(a.reqs, cliRequest{route, r.URL.RawQuery})
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if a.ambiguous && r.URL.Query().Get("namespace") == "" {
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"error":"forbidden"}`))
		return
	}
	answer := map[string]any{"kind": kind, "operationId": "op", "instance": "db", "expiresAt": "2026-12-01T00:00:30Z", "topologyGeneration": 1, "ttlSeconds": 5, "namespace": "team-a"}
	status := http.StatusOK
	switch {
	case route == "GET group":
		answer = map[string]any{"group": "g", "namespace": "team-a", "topologyGeneration": 1, "stable": true, "leases": []any{}}
	case r.Method == http.MethodPost:
		status = http.StatusCreated
		answer["token"] = "lease-token"
	case r.Method == http.MethodPut && in.Phase != "":
		answer["phase"] = in.Phase
	case r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(answer)
}

func (a *cliAPI) requests() []cliRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]cliRequest(nil), a.reqs...)
}

// serveCLI starts api over TLS and returns the connection flags that reach
// it, and a scratch directory.
func serveCLI(t *testing.T, api *cliAPI) (conn []string, dir string) {
	t.Helper()
	return serveCLIHandler(t, api)
}

// serveCLIHandler is serveCLI for any handler.
func serveCLIHandler(t *testing.T, api http.Handler) (conn []string, dir string) {
	t.Helper()
	srv := httptest.NewUnstartedServer(api)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	dir = t.TempDir()
	ca, tok := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tok, []byte("bearer"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--server", srv.URL, "--ca", ca, "--token-file", tok}, dir
}

// syncBuilder is a strings.Builder safe for the run's goroutines (its
// progress lines, mark-ddl's answer, the command's own output).
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// A run pins the namespace (--namespace, its environment variable, or the
// observation's) and names it on every later request: the grants, the
// DDL mark its command asks for, the confirming renewal and the releases.
func TestARunNamesThePinnedNamespaceOnEveryLaterRequest(t *testing.T) {
	t.Setenv(asCLI, "1") // the command's `mark-ddl` is this test binary
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		// firstBare: the first request (the observation) names none.
		firstBare bool
	}{
		"--namespace":                  {args: []string{"--namespace", "team-a"}},
		"the environment's namespace":  {env: map[string]string{EnvNamespace: "team-a"}},
		"--namespace over environment": {args: []string{"--namespace", "team-a"}, env: map[string]string{EnvNamespace: "team-z"}},
		"learned from the observation": {firstBare: true},
	} {
		t.Run(name, func(t *testing.T) {
			api := &cliAPI{}
			conn, dir := serveCLI(t, api)
			outcomeFile := filepath.Join(dir, "outcome.json")
			args := append([]string{"run"}, conn...)
			args = append(args, tc.args...)
			args = append(args, "--group", "g", "--instance", "db", "--ttl", "5", "--outcome-file", outcomeFile, "--", os.Args[0], "mark-ddl")
			var stdout, stderr syncBuilder
			if code := Run("bloodraven-deploy", args, strings.NewReader(""), &stdout, &stderr, env(tc.env)); code != ExitOK {
				t.Fatalf("exit %d, want 0:\n%s", code, stderr.String())
			}
			reqs := api.requests()
			for _, want := range []string{"GET group", "POST migration", "POST failover-hold", "PUT migration phase=ddl", "PUT migration phase=done", "DELETE failover-hold", "DELETE migration"} {
				found := false
				for _, r := range reqs {
					found = found || r.route == want
				}
				if !found {
					t.Errorf("no %s request: %v", want, reqs)
				}
			}
			for i, r := range reqs {
				want := "namespace=team-a"
				if i == 0 && tc.firstBare {
					want = ""
				}
				if r.query != want {
					t.Errorf("request %d, %s, was sent with query %q, want %q", i, r.route, r.query, want)
				}
			}
			var rec outcome
			if b, err := os.ReadFile(outcomeFile); err != nil || json.Unmarshal(b, &rec) != nil || rec.Namespace != "team-a" {
				t.Errorf("the outcome file does not name namespace team-a: %+v (%v)", rec, err)
			}
			if !strings.Contains(stderr.String(), "group team-a/g") {
				t.Errorf("the run does not name the group's namespace:\n%s", stderr.String())
			}
		})
	}
}

// Without --namespace, a first request refused 403 forbidden (what the
// server answers for a group name authorized in more than one namespace)
// exits 8 before the command starts and says that --namespace settles it;
// with --namespace the same server grants.
func TestAnAmbiguityAcrossNamespacesIsRefusedWithAHint(t *testing.T) {
	for name, tc := range map[string]struct {
		args     []string
		wantCode int
		wantMsg  []string
	}{
		"without --namespace": {wantCode: ExitRefused, wantMsg: []string{"forbidden (403)", "more than one namespace", "--namespace"}},
		"with --namespace":    {args: []string{"--namespace", "team-a"}, wantCode: ExitOK},
	} {
		t.Run(name, func(t *testing.T) {
			api := &cliAPI{ambiguous: true}
			conn, dir := serveCLI(t, api)
			ran := filepath.Join(dir, "ran")
			args := append(append([]string{"run"}, conn...), tc.args...)
			args = append(args, "--group", "g", "--instance", "db", "--ttl", "5", "--", "touch", ran)
			var stdout, stderr syncBuilder
			code := Run("bloodraven-deploy", args, strings.NewReader(""), &stdout, &stderr, env(nil))
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d:\n%s", code, tc.wantCode, stderr.String())
			}
			if _, err := os.Stat(ran); (err == nil) != (tc.wantCode == ExitOK) {
				t.Fatalf("the command ran: %v, want %v", err == nil, tc.wantCode == ExitOK)
			}
			for _, m := range tc.wantMsg {
				if !strings.Contains(stderr.String(), m) {
					t.Errorf("stderr does not say %q:\n%s", m, stderr.String())
				}
			}
		})
	}
}

// status takes --namespace and names it on its request; without it, a 403
// says that --namespace settles an ambiguity.
func TestStatusNamesTheNamespace(t *testing.T) {
	for name, tc := range map[string]struct {
		args      []string
		ambiguous bool
		wantCode  int
		wantQuery string
		wantErr   string
	}{
		"--namespace":                 {args: []string{"--namespace", "team-a"}, wantQuery: "namespace=team-a"},
		"without":                     {},
		"ambiguous without":           {ambiguous: true, wantCode: 1, wantErr: "--namespace"},
		"ambiguous with --namespace":  {args: []string{"--namespace", "team-a"}, ambiguous: true, wantQuery: "namespace=team-a"},
		"a namespace that is no name": {args: []string{"--namespace", "Team A"}, wantCode: ExitUsage},
	} {
		t.Run(name, func(t *testing.T) {
			api := &cliAPI{ambiguous: tc.ambiguous}
			conn, _ := serveCLI(t, api)
			args := append(append([]string{"status"}, conn...), tc.args...)
			args = append(args, "--group", "g")
			var stdout, stderr strings.Builder
			if code := Run("bloodraven-deploy", args, strings.NewReader(""), &stdout, &stderr, env(nil)); code != tc.wantCode {
				t.Fatalf("exit %d, want %d:\n%s", code, tc.wantCode, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("stderr does not say %q:\n%s", tc.wantErr, stderr.String())
			}
			if tc.wantCode == ExitUsage {
				if len(api.requests()) != 0 {
					t.Errorf("a request was sent with an invalid namespace: %v", api.requests())
				}
				return
			}
			if reqs := api.requests(); len(reqs) != 1 || reqs[0].query != tc.wantQuery {
				t.Fatalf("requests %v, want one with query %q", reqs, tc.wantQuery)
			}
			if tc.wantCode == ExitOK && !strings.Contains(stdout.String(), "team-a") {
				t.Errorf("the table does not show the namespace:\n%s", stdout.String())
			}
		})
	}
}

// The help of run and status lists --namespace and its variable.
func TestTheHelpListsNamespace(t *testing.T) {
	for _, cmd := range []string{"run", "status"} {
		var out, errb strings.Builder
		if code := Run("bloodraven-deploy", []string{cmd, "--help"}, strings.NewReader(""), &out, &errb, env(nil)); code != ExitOK {
			t.Fatalf("%s --help: exit %d: %s", cmd, code, errb.String())
		}
		for _, want := range []string{"--namespace", EnvNamespace} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s --help does not list %s:\n%s", cmd, want, out.String())
			}
		}
	}
}

// explain names --namespace as what settles a 403 when none was given, and
// the namespace when one was.
func TestExplainNamesTheNamespace(t *testing.T) {
	forbidden := &deployclient.AcquireError{Err: &deployclient.APIError{Status: 403, Code: "forbidden"}}
	for name, tc := range map[string]struct {
		err       error
		namespace string
		want      []string
	}{
		"forbidden without --namespace": {forbidden, "", []string{"spec.deploymentClients of MysqlDatabase db", "more than one namespace", "give --namespace"}},
		"forbidden with --namespace":    {forbidden, "team-a", []string{"spec.deploymentClients of MysqlDatabase db for group g in namespace team-a"}},
		"an answer for another namespace": {&deployclient.AcquireError{Err: &deployclient.NamespaceError{Pinned: "team-a", Answered: "team-b", Answer: "POST migration lease"}}, "team-a",
			[]string{`named namespace "team-b"`, `pinned to namespace "team-a"`}},
	} {
		t.Run(name, func(t *testing.T) {
			got := explain(tc.err, "g", tc.namespace, "db", "op", "/t", time.Minute)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("explain = %q, want %q in it", got, w)
				}
			}
			if tc.namespace != "" && strings.Contains(got, "give --namespace") {
				t.Errorf("explain = %q: --namespace was given", got)
			}
		})
	}
}

// status -o json prints every member the server sent: the client decodes
// with the wire types, so a member the server adds (admission was dropped
// before them) reaches the pipeline.
func TestStatusJSONKeepsEveryMemberTheServerSent(t *testing.T) {
	sent := `{"group":"g","namespace":"team-a","activeSite":"iad","topologyGeneration":3,` +
		`"health":{"ready":true,"degradedReason":"","replicationRunning":true,"replicationLagSeconds":0.5,"recoveryPending":false},` +
		`"operations":{"plannedFailover":{"phase":"Deferred","reason":"held"},"updatePhase":"","restoreInPlace":"","dragonflyUpgrade":""},` +
		`"stable":false,"unstableReason":"PlannedFailover","leases":[{"kind":"migration","operationId":"op","instance":"db","expiresAt":"2026-12-01T00:00:30Z","topologyGeneration":3}],` +
		`"admission":{"operation":"PlannedFailover","id":"req-7","budgetExhaustsAt":"2026-12-01T00:10:00Z"},` +
		`"cutOver":{"allowed":false,"reason":"PlannedOperationPending","message":"PlannedFailover \"req-7\" is Deferred (held)","marginSeconds":10}}`
	conn, _ := serveCLIHandler(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(sent))
	}))
	var stdout, stderr strings.Builder
	args := append(append([]string{"status"}, conn...), "--group", "g", "-o", "json")
	if code := Run("bloodraven-deploy", args, strings.NewReader(""), &stdout, &stderr, env(nil)); code != ExitOK {
		t.Fatalf("exit %d:\n%s", code, stderr.String())
	}
	var want, got map[string]any
	if err := json.Unmarshal([]byte(sent), &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(stdout.String()), &got); err != nil {
		t.Fatalf("status -o json is not JSON: %v\n%s", err, stdout.String())
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("status -o json\n  %v\nthe server sent\n  %v", got, want)
	}
}
