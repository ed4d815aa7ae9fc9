package deploycmd

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// oscAPI is cliAPI whose observation allows a cut-over or not, as the test
// says.
type oscAPI struct {
	cliAPI
	allowed atomic.Bool
}

func (a *oscAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || strings.Contains(r.URL.Path, "/leases") {
		a.cliAPI.ServeHTTP(w, r)
		return
	}
	a.mu.Lock()
	a.reqs = append(a.reqs, cliRequest{"GET group", r.URL.RawQuery})
	a.mu.Unlock()
	co := map[string]any{"allowed": true, "reason": "", "message": "", "marginSeconds": 10}
	if !a.allowed.Load() {
		co = map[string]any{"allowed": false, "reason": "PlannedOperationPending", "message": `PlannedFailover "req-1" is Deferred (DeploymentHold)`, "marginSeconds": 10}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"group": "g", "namespace": "team-a", "topologyGeneration": 1, "stable": a.allowed.Load(), "leases": []any{}, "cutOver": co})
}

func (a *oscAPI) sawPhaseDDL() bool {
	return slices.ContainsFunc(a.requests(), func(r cliRequest) bool { return r.route == "PUT migration phase=ddl" })
}

// gh-ost's postpone file (run --postpone-flag-file): it exists before the
// command starts; once the command said it is postponing, the run removes
// it only while the group allows a cut-over, with the DDL boundary
// confirmed first, and puts it back as soon as the group no longer does.
// The API is a stand-in here (it answers what the test says); the e2e
// tests run the same protocol against the operator.
func TestThePostponeFileIsRemovedOnlyWhileACutOverIsSafe(t *testing.T) {
	t.Setenv(asCLI, "1") // the command's `postponing` is this test binary
	api := &oscAPI{}
	conn, dir := serveCLIHandler(t, api)
	postpone, latch, outcomeFile := filepath.Join(dir, "postpone.flag"), filepath.Join(dir, "done"), filepath.Join(dir, "outcome.json")
	args := append([]string{"run"}, conn...)
	args = append(args, "--group", "g", "--instance", "db", "--ttl", "6", "--postpone-flag-file", postpone, "--cut-over-budget", "1s",
		"--outcome-file", outcomeFile, "--", "sh", "-c",
		`test -e "$1" && test "$BLOODRAVEN_POSTPONE_FLAG_FILE" = "$1" || { echo "no postpone file at the start" >&2; exit 9; }; "$0" postponing || exit 8; while [ ! -e "$2" ]; do sleep 0.05; done`,
		os.Args[0], postpone, latch)
	var stdout, stderr syncBuilder
	exited := make(chan int, 1)
	go func() { exited <- Run("bloodraven-deploy", args, strings.NewReader(""), &stdout, &stderr, env(nil)) }()

	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(15 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
			select {
			case code := <-exited:
				t.Fatalf("the run exited (%d) while waiting for %s:\n%s", code, what, stderr.String())
			default:
			}
			if time.Now().After(end) {
				t.Fatalf("no %s within 15 s:\n%s", what, stderr.String())
			}
		}
	}
	waitUntil("postponing", func() bool { return strings.Contains(stderr.String(), "it postpones its cut-over") })
	// Refused: the file stays through several observations.
	for range 3 {
		time.Sleep(time.Second)
		if !fileExists(postpone) || api.sawPhaseDDL() {
			t.Fatalf("the postpone file was removed (or the boundary marked) while the group refused a cut-over:\n%s", stderr.String())
		}
	}
	if !strings.Contains(stderr.String(), "cut-over not allowed yet: PlannedOperationPending") {
		t.Errorf("the run does not say why the cut-over waits:\n%s", stderr.String())
	}
	// Allowed: the boundary is confirmed, then the file goes.
	api.allowed.Store(true)
	waitUntil("removal", func() bool { return !fileExists(postpone) })
	if !api.sawPhaseDDL() {
		t.Fatal("the postpone file was removed before the DDL boundary was confirmed (PUT phase=ddl)")
	}
	// Refused again before the tool cut over: the file is back.
	api.allowed.Store(false)
	waitUntil("the file put back", func() bool { return fileExists(postpone) })
	api.allowed.Store(true)
	waitUntil("a second removal", func() bool { return !fileExists(postpone) })
	if err := os.WriteFile(latch, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exited:
		if code != ExitOK {
			t.Fatalf("exit %d, want 0:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the run did not end:\n%s", stderr.String())
	}
	for _, want := range []string{"is back", "the DDL boundary is marked and confirmed, and"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("the run's log lacks %q:\n%s", want, stderr.String())
		}
	}
}

// A run lost while its tool's cut-over waits tells the abort command so:
// BLOODRAVEN_LOST_STAGE is awaiting-cut-over, the outcome's lostStage too,
// and nothing was marked (exit 4, no gate).
func TestALossWhileTheCutOverWaitsIsALossBeforeTheBoundary(t *testing.T) {
	t.Setenv(asCLI, "1")
	api := &revokingAPI{oscAPI: oscAPI{}}
	conn, dir := serveCLIHandler(t, api)
	stageFile, outcomeFile := filepath.Join(dir, "stage"), filepath.Join(dir, "outcome.json")
	args := append([]string{"run"}, conn...)
	args = append(args, "--group", "g", "--instance", "db", "--ttl", "6", "--outcome-file", outcomeFile,
		"--on-abort", `echo "$BLOODRAVEN_LOST_STAGE $BLOODRAVEN_LOST_CAUSE" > "`+stageFile+`"`,
		"--", "sh", "-c", `"$0" cut-over --budget 1s --timeout 1m; echo "cut-over exit $?" >&2; sleep 60`, os.Args[0])
	var stdout, stderr syncBuilder
	exited := make(chan int, 1)
	go func() { exited <- Run("bloodraven-deploy", args, strings.NewReader(""), &stdout, &stderr, env(nil)) }()
	for end := time.Now().Add(15 * time.Second); !strings.Contains(stderr.String(), "cut-over not allowed yet"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the cut-over did not wait:\n%s", stderr.String())
		}
	}
	api.revoke.Store(true)
	select {
	case code := <-exited:
		if code != ExitLostBeforeDDL {
			t.Fatalf("exit %d, want %d:\n%s", code, ExitLostBeforeDDL, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the run did not end:\n%s", stderr.String())
	}
	b, err := os.ReadFile(stageFile)
	if err != nil || !strings.HasPrefix(string(b), StageAwaitingCutOver+" ") {
		t.Fatalf("the abort command saw stage %q (%v), want %s", b, err, StageAwaitingCutOver)
	}
	var rec outcome
	if b, err := os.ReadFile(outcomeFile); err != nil || json.Unmarshal(b, &rec) != nil || rec.Outcome != "lost-before-ddl" || rec.LostStage != StageAwaitingCutOver {
		t.Fatalf("outcome %+v (%v), want lost-before-ddl at %s", rec, err, StageAwaitingCutOver)
	}
	if api.sawPhaseDDL() {
		t.Fatal("the boundary was marked although the cut-over never was allowed")
	}
}

// revokingAPI refuses the cut-over, then, once told, answers every renewal
// 409 revoked.
type revokingAPI struct {
	oscAPI
	revoke atomic.Bool
}

func (a *revokingAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a.revoke.Load() && r.Method == http.MethodPut {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error":"revoked","reason":"deferral_budget_exhausted","topologyGeneration":1}`))
		return
	}
	a.oscAPI.ServeHTTP(w, r)
}
