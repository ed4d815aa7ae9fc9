package cli_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/shipstream/bloodraven/deployclient"
	"github.com/shipstream/bloodraven/deployclient/deploycmd"
	"github.com/shipstream/bloodraven/deployclient/wire"
	"github.com/shipstream/bloodraven/internal/operatortest"
	"github.com/shipstream/bloodraven/internal/testenv"
)

// The test binary doubles as the CLI: run with reexecEnv=1 and the
// arguments "deploy ...", it is `bloodraven deploy ...` (the same Main the
// operator's binary dispatches to), as a separate process.
const reexecEnv = "BLOODRAVEN_DEPLOYCMD_TEST_CLI"

var env *testenv.Env

func TestMain(m *testing.M) {
	if os.Getenv(reexecEnv) == "1" && len(os.Args) > 1 && os.Args[1] == "deploy" {
		os.Exit(deploycmd.Main(os.Args[2:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
	}
	os.Exit(testenv.Main(m, &env))
}

// syncBuffer is a bytes.Buffer safe for a process's output and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// call is one request the operator answered.
type call struct {
	method, path string
	status       int
	at           time.Time // when the request arrived
}

type recorder struct {
	mu    sync.Mutex
	calls []call
	// tokens are the lease tokens the operator handed out.
	tokens []string
}

type statusWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (w *statusWriter) WriteHeader(s int) { w.status = s; w.ResponseWriter.WriteHeader(s) }
func (w *statusWriter) Write(b []byte) (int, error) {
	w.body.Write(b)
	return w.ResponseWriter.Write(b)
}

func (rec *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: 200}
		h.ServeHTTP(sw, r)
		var grant wire.Grant
		_ = json.Unmarshal(sw.body.Bytes(), &grant)
		rec.mu.Lock()
		rec.calls = append(rec.calls, call{r.Method, r.URL.Path, sw.status, at})
		if grant.Token != "" {
			rec.tokens = append(rec.tokens, grant.Token)
		}
		rec.mu.Unlock()
	})
}

func (rec *recorder) all() []call {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]call(nil), rec.calls...)
}

// scene is an in-process operator and the environment a pipeline Pod would
// give the CLI: server, CA and token file, so runs need only --group and
// --instance.
type scene struct {
	t         *testing.T
	op        *operatortest.Operator
	rec       *recorder
	dir       string
	tokenFile string
}

func newScene(t *testing.T, opts operatortest.Options) *scene {
	t.Helper()
	rec := &recorder{}
	opts.Wrap = rec.wrap
	op := operatortest.Start(t, env, opts)
	return &scene{t: t, op: op, rec: rec, dir: t.TempDir(), tokenFile: op.TokenFile()}
}

// proc is a running CLI.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{}
	code           int
}

// start runs `bloodraven deploy args...` with the scene's environment.
func (s *scene) start(args ...string) *proc {
	s.t.Helper()
	return s.startWith(nil, args...)
}

// startWith is start with more environment (later entries win).
func (s *scene) startWith(env []string, args ...string) *proc {
	s.t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"deploy"}, args...)...)
	cmd.Env = append(os.Environ(), reexecEnv+"=1",
		deploycmd.EnvServer+"="+s.op.URL, deploycmd.EnvCA+"="+s.op.CAFile, deploycmd.EnvTokenFile+"="+s.tokenFile,
		"BR="+os.Args[0], "OUT="+s.dir,
		// The run's private directory in a directory the test removes: a
		// run killed -9 cannot remove it itself.
		"TMPDIR="+testenv.ShortTempDir(s.t))
	cmd.Env = append(cmd.Env, env...)
	p := &proc{cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	// A process the CLI failed to stop would hold the output pipes open and
	// keep Wait from returning: do not wait for them past the CLI's exit.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
			p.code = 0
		case errors.As(err, &ee):
			p.code = ee.ExitCode()
		default:
			p.code = -1
		}
		close(p.done)
	}()
	s.t.Cleanup(func() { _ = cmd.Process.Kill(); <-p.done })
	return p
}

// wait waits for the CLI's exit code.
func (p *proc) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("the CLI did not exit within %s; stderr:\n%s", within, p.stderr.String())
	}
	t.Logf("exit %d; stderr:\n%s", p.code, p.stderr.String())
	return p.code
}

// run runs the CLI to its end.
func (s *scene) run(within time.Duration, args ...string) (int, *proc) {
	s.t.Helper()
	p := s.start(args...)
	return p.wait(s.t, within), p
}

// waitFile waits for a file the child writes.
func (s *scene) waitFile(name string, within time.Duration) string {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(filepath.Join(s.dir, name)); err == nil {
			return string(b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("%s was not written within %s", name, within)
	return ""
}

func (s *scene) read(name string) string {
	b, _ := os.ReadFile(filepath.Join(s.dir, name))
	return string(b)
}

func (s *scene) observe() *deployclient.Group {
	s.t.Helper()
	c, err := deployclient.New(deployclient.Config{Server: s.op.URL, CAFile: s.op.CAFile, TokenFile: s.tokenFile})
	if err != nil {
		s.t.Fatal(err)
	}
	g, err := c.Observe(context.Background(), operatortest.GroupName)
	if err != nil {
		s.t.Fatal(err)
	}
	return g
}

// noSecrets fails when output carries the bearer token or a lease token.
func (s *scene) noSecrets(out string) {
	s.t.Helper()
	tok, _ := os.ReadFile(s.tokenFile)
	if strings.Contains(out, strings.TrimSpace(string(tok))) {
		s.t.Fatal("the output carries the bearer token")
	}
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	if len(s.rec.tokens) == 0 {
		s.t.Fatal("no lease token was handed out")
	}
	for _, lt := range s.rec.tokens {
		if strings.Contains(out, lt) {
			s.t.Fatal("the output carries a lease token")
		}
	}
}

func deletes(calls []call) []string {
	var out []string
	for _, c := range calls {
		if c.method == http.MethodDelete {
			parts := strings.Split(c.path, "/")
			out = append(out, parts[len(parts)-2])
		}
	}
	return out
}

func TestRunSucceedsAndReleasesTheHoldThenTheMutex(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	outcome := filepath.Join(s.dir, "outcome.json")
	code, p := s.run(60*time.Second, "run", "--group", operatortest.GroupName, "--instance", operatortest.Instance,
		"--ttl", "6", "--operation-id", "op-ok", "--outcome-file", outcome, "--",
		"sh", "-c", `echo "$BLOODRAVEN_GROUP $BLOODRAVEN_INSTANCE $BLOODRAVEN_OPERATION_ID $BLOODRAVEN_TOPOLOGY_GENERATION" > "$OUT/env"; sleep 3; echo migrated`)
	if code != deploycmd.ExitOK {
		t.Fatalf("exit %d, want 0", code)
	}
	if got := s.read("env"); got != "orders orders-app op-ok 1\n" {
		t.Fatalf("the command's environment: %q", got)
	}
	if !strings.Contains(p.stdout.String(), "migrated") {
		t.Fatalf("the command's stdout was not passed through: %q", p.stdout.String())
	}
	if got := deletes(s.rec.all()); strings.Join(got, ",") != "failover-hold,migration" {
		t.Fatalf("releases %v, want the hold, then the migration", got)
	}
	var rec map[string]any
	b, _ := os.ReadFile(outcome)
	if err := json.Unmarshal(b, &rec); err != nil || rec["outcome"] != "succeeded" || rec["operationId"] != "op-ok" {
		t.Fatalf("outcome file %s: %v", b, err)
	}
	if n := len(s.observe().Leases); n != 0 {
		t.Fatalf("%d live leases after the run", n)
	}
	s.noSecrets(p.stderr.String() + p.stdout.String())
}

func TestAFailingCommandExits1AndReleasesBoth(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	code, p := s.run(60*time.Second, "run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--", "sh", "-c", "exit 7")
	if code != deploycmd.ExitChildFailed {
		t.Fatalf("exit %d, want %d", code, deploycmd.ExitChildFailed)
	}
	if !strings.Contains(p.stderr.String(), "exit status 7") {
		t.Fatalf("stderr does not name the command's status")
	}
	if got := deletes(s.rec.all()); strings.Join(got, ",") != "failover-hold,migration" {
		t.Fatalf("releases %v, want the hold, then the migration", got)
	}
}

func TestAGenerationBumpAfterTheDDLMarkStopsTheCommandForAPerson(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	p := s.start("run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--ttl", "5",
		"--on-abort", `touch "$OUT/abort-ran"`, "--",
		"sh", "-c", `"$BR" deploy mark-ddl && echo $$ > "$OUT/pid" && exec sleep 120`)
	pid := strings.TrimSpace(s.waitFile("pid", 30*time.Second))
	s.op.KillPrimary()
	s.op.WaitGeneration(2, 30*time.Second)
	if code := p.wait(t, 30*time.Second); code != deploycmd.ExitLostAfterDDL {
		t.Fatalf("exit %d, want %d (lost after the DDL boundary)", code, deploycmd.ExitLostAfterDDL)
	}
	stderr := p.stderr.String()
	for _, want := range []string{"revoked (topology_changed)", "a person must verify the schema", "Do not reconnect to the new primary"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	if s.read("abort-ran") != "" || fileExists(filepath.Join(s.dir, "abort-ran")) {
		t.Fatal("the abort command ran after the DDL boundary")
	}
	if processAlive(pid) {
		t.Fatalf("the command (pid %s) is still running", pid)
	}
	if got := deletes(s.rec.all()); len(got) == 0 || got[0] != "failover-hold" {
		t.Fatalf("releases %v, want the hold first", got)
	}
}

func TestAGenerationBumpBeforeTheDDLMarkRunsTheFencedAbort(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	// The command ignores SIGTERM: it is killed after --grace.
	p := s.start("run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--ttl", "5", "--grace", "1s",
		"--on-abort", `echo "$BLOODRAVEN_LOST_CAUSE $BLOODRAVEN_TOPOLOGY_GENERATION $BLOODRAVEN_OPERATION_ID" > "$OUT/abort"`, "--",
		"sh", "-c", `trap "" TERM; echo $$ > "$OUT/pid"; while :; do sleep 0.2; done`)
	pid := strings.TrimSpace(s.waitFile("pid", 30*time.Second))
	s.op.KillPrimary()
	if code := p.wait(t, 45*time.Second); code != deploycmd.ExitLostBeforeDDL {
		t.Fatalf("exit %d, want %d (lost before the DDL boundary)", code, deploycmd.ExitLostBeforeDDL)
	}
	abort := s.read("abort")
	if !strings.HasPrefix(abort, "revoked:topology_changed 1 ") {
		t.Fatalf("the abort command saw %q, want the cause and the grant generation", abort)
	}
	if processAlive(pid) {
		t.Fatalf("the command (pid %s) survived SIGKILL", pid)
	}
	if !strings.Contains(p.stderr.String(), "SIGKILL after 1s") {
		t.Fatalf("stderr does not say how the command is stopped")
	}
}

func TestUnstableAnswersEndTheRunAtTheConfirmedDeadlineEvenWithTheServerClock60sAhead(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{Skew: 60 * time.Second})
	p := s.start("run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--ttl", "5", "--",
		"sh", "-c", `echo $$ > "$OUT/pid"; exec sleep 120`)
	s.waitFile("pid", 30*time.Second)
	g := s.observe()
	if len(g.Leases) != 2 {
		t.Fatalf("leases %+v", g.Leases)
	}
	serverExpiry, _ := time.Parse(time.RFC3339Nano, g.Leases[0].ExpiresAt)
	s.op.SetTransition()
	set := time.Now()
	if code := p.wait(t, 40*time.Second); code != deploycmd.ExitLostBeforeDDL {
		t.Fatalf("exit %d, want %d", code, deploycmd.ExitLostBeforeDDL)
	}
	ended := time.Now()
	if !strings.Contains(p.stderr.String(), "not confirmed before its deadline (last answer: 423 unstable") {
		t.Fatalf("stderr does not say the deadline passed under 423s")
	}
	// The server's expiresAt is a minute ahead of the client's clock; the
	// run ended on its own deadline (at most a ttl after the transition),
	// long before that.
	if ended.After(serverExpiry.Add(-40 * time.Second)) {
		t.Fatalf("the run ended at %s, near the server's expiresAt %s: the server's clock stretched the deadline", ended, serverExpiry)
	}
	t.Logf("ended %s after the transition; the server's expiresAt was %s away", ended.Sub(set).Round(time.Millisecond), serverExpiry.Sub(set).Round(time.Second))
}

func TestARotatedTokenFileIsPickedUpByARun(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	old, oldBinding := s.op.Token()
	if err := os.WriteFile(s.tokenFile, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	// The run outlives the operator's 15 s TokenReview cache of the old
	// token, which stops working once its binding is deleted.
	p := s.start("run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--ttl", "5", "--",
		"sh", "-c", `touch "$OUT/started"; sleep 22`)
	s.waitFile("started", 30*time.Second)
	fresh, _ := s.op.Token()
	tmp := s.tokenFile + ".new"
	if err := os.WriteFile(tmp, []byte(fresh), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, s.tokenFile); err != nil {
		t.Fatal(err)
	}
	s.op.Unbind(oldBinding)
	if code := p.wait(t, 60*time.Second); code != deploycmd.ExitOK {
		t.Fatalf("exit %d, want 0: the run kept the old token", code)
	}
	if sha256.Sum256([]byte(old)) == sha256.Sum256([]byte(fresh)) {
		t.Fatal("the two tokens are the same")
	}
}

func TestASecondRunWaitsForTheFirstThenProceeds(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	log := `echo "$BLOODRAVEN_OPERATION_ID start" >> "$OUT/log"; sleep %s; echo "$BLOODRAVEN_OPERATION_ID end" >> "$OUT/log"`
	first := s.start("run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--ttl", "5", "--operation-id", "first", "--",
		"sh", "-c", strings.Replace(log, "%s", "4", 1))
	s.waitFile("log", 30*time.Second)
	second := s.start("run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--ttl", "5", "--operation-id", "second", "--wait", "1m", "--",
		"sh", "-c", strings.Replace(log, "%s", "0", 1))
	if code := first.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("first run: exit %d", code)
	}
	if code := second.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("second run: exit %d", code)
	}
	if got := s.read("log"); got != "first start\nfirst end\nsecond start\nsecond end\n" {
		t.Fatalf("the runs overlapped:\n%s", got)
	}
	if !strings.Contains(second.stderr.String(), "is held by operation first (instance orders-app) until 20") {
		t.Fatalf("the waiting run did not name the holder and its expiry")
	}
}

func TestTheRevokeAnnotationEndsARun(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	p := s.start("run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--ttl", "5", "--",
		"sh", "-c", `touch "$OUT/started"; exec sleep 120`)
	s.waitFile("started", 30*time.Second)
	s.op.RevokeAll()
	if code := p.wait(t, 30*time.Second); code != deploycmd.ExitLostBeforeDDL {
		t.Fatalf("exit %d, want %d", code, deploycmd.ExitLostBeforeDDL)
	}
	if !strings.Contains(p.stderr.String(), "revoked (operator_revoked)") {
		t.Fatalf("stderr does not name the revocation")
	}
	// The revoked operation is never granted again: a refusal no retry
	// changes, exit 8.
	code, p2 := s.run(30*time.Second, "run", "--group", operatortest.GroupName, "--instance", operatortest.Instance,
		"--operation-id", operationID(p.stderr.String()), "--wait", "2s", "--", "true")
	if code != deploycmd.ExitRefused || !strings.Contains(p2.stderr.String(), "can never be granted again") {
		t.Fatalf("re-running the revoked operation: exit %d, want %d", code, deploycmd.ExitRefused)
	}
}

// operationID finds the generated operation id in a run's stderr.
func operationID(stderr string) string {
	_, rest, _ := strings.Cut(stderr, "(operation ")
	id, _, _ := strings.Cut(rest, ",")
	return id
}

// Runs that cannot acquire start nothing: exit 3 for what a retry may
// change, exit 8 for a refusal it cannot (403 forbidden).
func TestRunsThatCannotAcquireExit3Or8AndStartNothing(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	// An identity that is not a deployment client of the database.
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "stranger", Namespace: s.op.ClientNamespace}}); err != nil {
		t.Fatal(err)
	}
	tr, err := env.Kube.CoreV1().ServiceAccounts(s.op.ClientNamespace).CreateToken(ctx, "stranger", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{operatortest.Audience}, ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stranger := filepath.Join(s.dir, "stranger-token")
	if err := os.WriteFile(stranger, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	holder := s.start("run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--operation-id", "holder", "--",
		"sh", "-c", `touch "$OUT/holding"; sleep 30`)
	s.waitFile("holding", 30*time.Second)

	for name, tc := range map[string]struct {
		args []string
		code int
		want string
	}{
		"held past --wait": {[]string{"--wait", "1s"}, deploycmd.ExitNotAcquired, "still held by operation holder (instance orders-app, until 20"},
		"forbidden":        {[]string{"--token-file", stranger}, deploycmd.ExitRefused, "forbidden (403): this ServiceAccount is not in spec.deploymentClients"},
		"unreachable":      {[]string{"--server", "https://127.0.0.1:1", "--wait", "1s"}, deploycmd.ExitNotAcquired, "is the deployment API reachable"},
		"wrong CA":         {[]string{"--ca", writeForeignCA(t, s.dir)}, deploycmd.ExitNotAcquired, "certificate"},
	} {
		args := append([]string{"run", "--group", operatortest.GroupName, "--instance", operatortest.Instance}, tc.args...)
		args = append(args, "--", "sh", "-c", `touch "$OUT/ran"`)
		code, p := s.run(30*time.Second, args...)
		if code != tc.code {
			t.Errorf("%s: exit %d, want %d", name, code, tc.code)
		}
		if !strings.Contains(p.stderr.String(), tc.want) {
			t.Errorf("%s: stderr lacks %q", name, tc.want)
		}
	}
	if fileExists(filepath.Join(s.dir, "ran")) {
		t.Fatal("a command ran without the leases")
	}
	if code := holder.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("the holder's run: exit %d", code)
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	for name, args := range map[string][]string{
		"no command":             {"run", "--group", "g", "--instance", "i", "--token-file", os.Args[0]},
		"no group":               {"run", "--instance", "i", "--", "true"},
		"unknown verb":           {"frobnicate"},
		"no token":               {"run", "--group", "g", "--instance", "i", "--token-file", "/nonexistent/token", "--", "true"},
		"plain http":             {"status", "--group", "g", "--server", "http://localhost:8082", "--token-file", os.Args[0]},
		"mark-ddl outside a run": {"mark-ddl"},
		"grace over ttl/3":       {"run", "--group", "g", "--instance", "i", "--ttl", "30", "--grace", "11s", "--token-file", os.Args[0], "--", "true"},
	} {
		var stdout, stderr bytes.Buffer
		getenv := func(string) string { return "" }
		if code := deploycmd.Main(args, nil, &stdout, &stderr, getenv); code != deploycmd.ExitUsage {
			t.Errorf("%s: exit %d, want 2 (stderr %q)", name, code, stderr.String())
		}
		if stderr.Len() == 0 {
			t.Errorf("%s: no message", name)
		}
	}
}

func TestStatusPrintsTheObservation(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	holder := s.start("run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--operation-id", "op-visible", "--",
		"sh", "-c", `touch "$OUT/holding"; sleep 20`)
	s.waitFile("holding", 30*time.Second)

	code, p := s.run(30*time.Second, "status", "--group", operatortest.GroupName)
	if code != 0 {
		t.Fatalf("status: exit %d", code)
	}
	table := p.stdout.String()
	for _, want := range []string{"GROUP", "ACTIVE SITE", "GENERATION", "orders", "iad", "KIND", "migration", "failover-hold", "op-visible"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
	code, p = s.run(30*time.Second, "status", "--group", operatortest.GroupName, "-o", "json")
	if code != 0 {
		t.Fatalf("status -o json: exit %d", code)
	}
	var g map[string]any
	if err := json.Unmarshal([]byte(p.stdout.String()), &g); err != nil {
		t.Fatalf("-o json is not JSON: %v\n%s", err, p.stdout.String())
	}
	for _, k := range []string{"group", "namespace", "activeSite", "topologyGeneration", "health", "operations", "stable", "unstableReason", "leases"} {
		if _, ok := g[k]; !ok {
			t.Errorf("-o json lacks %q", k)
		}
	}
	if leases, _ := g["leases"].([]any); len(leases) != 2 {
		t.Errorf("-o json leases %v, want 2", g["leases"])
	}
	s.noSecrets(table + p.stdout.String())
	_ = holder.cmd.Process.Signal(os.Interrupt)
	if code := holder.wait(t, 30*time.Second); code != deploycmd.ExitChildFailed {
		t.Fatalf("an interrupted run: exit %d, want %d (the command was interrupted)", code, deploycmd.ExitChildFailed)
	}
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o644) }

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// processAlive reports whether pid still runs (and is not a zombie).
func processAlive(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

// writeForeignCA writes a CA the server's certificate does not chain to.
func writeForeignCA(t *testing.T, dir string) string {
	t.Helper()
	op := operatortest.NewCA(t)
	path := filepath.Join(dir, "foreign-ca.crt")
	if err := os.WriteFile(path, op, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTheCommandIsGoneByTheDeadlineEvenIfItIgnoresSIGTERM(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	p := s.start("run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--ttl", "6", "--grace", "2s", "--",
		"sh", "-c", `trap "" TERM; echo $$ > "$OUT/pid"; while :; do sleep 0.1; done`)
	pid := strings.TrimSpace(s.waitFile("pid", 30*time.Second))
	s.op.SetTransition()
	// Watch the command die.
	var died time.Time
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if !processAlive(pid) {
			died = time.Now()
			break
		}
	}
	if died.IsZero() {
		t.Fatal("the command did not die")
	}
	if code := p.wait(t, 30*time.Second); code != deploycmd.ExitLostBeforeDDL {
		t.Fatalf("exit %d, want %d", code, deploycmd.ExitLostBeforeDDL)
	}
	// The client's deadline is the send time of the last confirmed renewal
	// plus the ttl; that request arrived after it was sent.
	var lastOK time.Time
	for _, c := range s.rec.all() {
		if (c.method == http.MethodPut || c.method == http.MethodPost) && (c.status == 200 || c.status == 201) && c.at.After(lastOK) {
			lastOK = c.at
		}
	}
	deadline := lastOK.Add(6 * time.Second)
	if died.After(deadline.Add(50 * time.Millisecond)) { // the poll's resolution
		t.Fatalf("the command died %s after the confirmed deadline", died.Sub(deadline))
	}
	t.Logf("the command died %s before the confirmed deadline", deadline.Sub(died).Round(time.Millisecond))
}

func TestWhatTheCommandLeftRunningIsStoppedBeforeTheRelease(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	// The background process writes the time every 50 ms while it lives.
	code, _ := s.run(60*time.Second, "run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--ttl", "6", "--",
		"sh", "-c", `(while :; do date +%s.%N > "$OUT/alive.tmp"; mv "$OUT/alive.tmp" "$OUT/alive"; sleep 0.05; done) & sleep 0.5`)
	if code != deploycmd.ExitOK {
		t.Fatalf("exit %d", code)
	}
	var released time.Time
	for _, c := range s.rec.all() {
		if c.method == http.MethodDelete && strings.Contains(c.path, "/migration/") {
			released = c.at
		}
	}
	sec, err := strconv.ParseFloat(strings.TrimSpace(s.read("alive")), 64)
	if err != nil || released.IsZero() {
		t.Fatalf("alive %q (%v), released at %s", s.read("alive"), err, released)
	}
	lastAlive := time.Unix(0, int64(sec*1e9))
	if !lastAlive.Before(released) {
		t.Fatalf("the background process was still running %s after the migration mutex was released", lastAlive.Sub(released))
	}
}

func TestKillingTheRunKillsTheCommand(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	p := s.start("run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--ttl", "6", "--",
		"sh", "-c", `echo $$ > "$OUT/pid"; exec sleep 120`)
	pid := strings.TrimSpace(s.waitFile("pid", 30*time.Second))
	if err := p.cmd.Process.Kill(); err != nil { // SIGKILL: no handler runs
		t.Fatal(err)
	}
	<-p.done
	for end := time.Now().Add(10 * time.Second); processAlive(pid); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the command (pid %s) outlived its killed run", pid)
		}
	}
}

func TestAnOutcomeThatCannotBeRecordedKeepsTheMutexAndExits7(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	code, p := s.run(60*time.Second, "run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--ttl", "6",
		"--outcome-file", filepath.Join(s.dir, "missing-dir", "outcome.json"), "--", "true")
	if code != deploycmd.ExitNotRecorded {
		t.Fatalf("exit %d, want %d", code, deploycmd.ExitNotRecorded)
	}
	if !strings.Contains(p.stderr.String(), "the outcome was not recorded") {
		t.Fatal("stderr does not say the outcome was not recorded")
	}
	g := s.observe()
	if len(g.Leases) != 1 || g.Leases[0].Kind != deployclient.KindMigration {
		t.Fatalf("leases %+v, want the migration mutex alone, left to lapse", g.Leases)
	}
}
