package cli_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shipstream/bloodraven/deployclient/deploycmd"
	"github.com/shipstream/bloodraven/internal/operatortest"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// stamp writes the child's own clock (seconds since the epoch, with
// nanoseconds) to $OUT/<name>: the children record their start and end
// themselves.
func stamp(name string) string { return `date +%s.%N > "$OUT/` + name + `"` }

// stampedTime reads a stamp.
func (s *scene) stampedTime(name string) time.Time {
	s.t.Helper()
	raw := strings.TrimSpace(s.read(name))
	f, err := strconv.ParseFloat(raw, 64)
	if err != nil {
		s.t.Fatalf("%s: %q is not a time stamp", name, raw)
	}
	return time.Unix(0, int64(f*1e9))
}

// A child that records its start, and its end however it ends (SIGTERM
// included), and runs for secs seconds.
func recordingChild(name string, secs int) string {
	return stamp(name+".start") + `; trap '` + stamp(name+".end") + `; exit 143' TERM; sleep ` + strconv.Itoa(secs) + ` & wait; ` + stamp(name+".end")
}

// One runner at a time. Run A holds operation orders-r42 and runs its
// command. A second run with the same id and no --take-over exits 3 and
// names the operation, without starting anything and without disturbing A.
// A third with --take-over re-grants the operation (A's token stops working
// and A stops its command within a second, exit 4) and starts its command
// only 120 s later: the children's own records never overlap.
func TestASecondRunnerOfTheSameOperationNeverOverlapsTheFirst(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	const op = "orders-r42"
	a := s.start("run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--operation-id", op, "--ttl", "30", "--",
		"sh", "-c", recordingChild("a", 60))
	s.waitFile("a.start", 30*time.Second)

	code, c := s.run(30*time.Second, "run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--operation-id", op, "--",
		"sh", "-c", stamp("c.start"))
	if code != deploycmd.ExitNotAcquired || !strings.Contains(c.stderr.String(), "operation "+op+" (instance orders-app) is live under another runner") {
		t.Fatalf("a second runner without --take-over: exit %d, want %d naming the live operation", code, deploycmd.ExitNotAcquired)
	}
	if fileExists(s.dir+"/c.start") || fileExists(s.dir+"/a.end") {
		t.Fatal("the second runner started its command, or disturbed the first")
	}

	b := s.start("run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--operation-id", op, "--take-over", "--",
		"sh", "-c", recordingChild("b", 1))
	if code := a.wait(t, 30*time.Second); code != deploycmd.ExitLostBeforeDDL {
		t.Fatalf("the first runner, taken over: exit %d, want %d", code, deploycmd.ExitLostBeforeDDL)
	}
	if code := b.wait(t, 200*time.Second); code != deploycmd.ExitOK {
		t.Fatalf("the taking-over run: exit %d, want 0", code)
	}
	aEnd, bStart := s.stampedTime("a.end"), s.stampedTime("b.start")
	if !bStart.After(aEnd) {
		t.Fatalf("the commands overlapped: b started at %s, a ended at %s", bStart, aEnd)
	}
	if gap := bStart.Sub(aEnd); gap < 115*time.Second {
		t.Fatalf("the take-over started %s after the first command ended; it waits 120 s from its re-grant", gap)
	}
	t.Logf("a ran %s..%s; b started %s after a ended", s.stampedTime("a.start").Format(time.StampMilli), aEnd.Format(time.StampMilli), bStart.Sub(aEnd).Round(time.Millisecond))
}

// A revocation while the command runs stops it within 1.5 s (the lease
// GET, not the heartbeat: the ttl is 30 s, renewed every 10 s), and the run
// exits 4 before the DDL boundary or 5 after it, never 0.
func TestARevocationStopsTheCommandWithinASecondAndSecond(t *testing.T) {
	cases := []struct {
		name   string
		ddl    bool
		revoke func(s *scene) time.Time // returns when the revocation happened
		want   int
	}{
		{name: "revoke annotation, before the DDL boundary", want: deploycmd.ExitLostBeforeDDL,
			revoke: func(s *scene) time.Time { at := time.Now(); s.op.RevokeAll(); return at }},
		{name: "emergency failover, after the DDL boundary", ddl: true, want: deploycmd.ExitLostAfterDDL,
			revoke: func(s *scene) time.Time {
				s.op.KillPrimary()
				g := s.op.WaitGeneration(2, 60*time.Second)
				return g.Status.TopologyGenerationTime.Time
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newScene(t, operatortest.Options{})
			child := `trap '` + stamp("stopped") + `; exit 143' TERM; touch "$OUT/started"; while :; do sleep 0.05; done`
			if tc.ddl {
				child = `"$BR" deploy mark-ddl || exit 9; ` + child
			}
			p := s.start("run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--ttl", "30", "--", "sh", "-c", child)
			s.waitFile("started", 30*time.Second)
			at := tc.revoke(s)
			code := p.wait(t, 60*time.Second)
			if code != tc.want {
				t.Fatalf("exit %d, want %d", code, tc.want)
			}
			took := s.stampedTime("stopped").Sub(at)
			t.Logf("the command was stopped %s after the revocation", took.Round(time.Millisecond))
			if took > 1500*time.Millisecond {
				t.Fatalf("the command was stopped %s after the revocation, want within 1.5 s", took)
			}
		})
	}
}

// balancer is a TCP balancer that picks a backend per connection, round
// robin, as kube-proxy does for a Service (there is no kube-proxy here).
type balancer struct {
	ln       net.Listener
	backends []string
	next     atomic.Int64
	dials    sync.Map // backend -> *atomic.Int64
}

func newBalancer(t *testing.T, backends ...string) *balancer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &balancer{ln: ln, backends: backends}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			backend := b.backends[int(b.next.Add(1)-1)%len(b.backends)]
			n, _ := b.dials.LoadOrStore(backend, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", backend)
				if err != nil {
					return
				}
				defer out.Close()
				go func() { _, _ = io.Copy(out, in); out.Close() }()
				_, _ = io.Copy(in, out)
			}()
		}
	}()
	return b
}

func (b *balancer) url() string { return "https://" + b.ln.Addr().String() }

// Two replicas behind a balancer that picks a backend per connection: the
// run's first connection lands on the follower, which answers 503
// not_leader and closes it; the client drops its idle connections, dials
// again and reaches the leader, well within --wait. Then leadership moves
// to the other replica while the command runs: the heartbeat (and the
// watch) follow it, and the run succeeds.
func TestARunBehindABalancerFindsTheLeaderAndFollowsALeaderChange(t *testing.T) {
	t.Parallel()
	var firstLeads, secondLeads atomic.Bool
	secondLeads.Store(true)
	rec := &recorder{}
	op := operatortest.Start(t, env, operatortest.Options{Wrap: rec.wrap, IsLeader: firstLeads.Load})
	s := &scene{t: t, op: op, rec: rec, dir: t.TempDir(), tokenFile: op.TokenFile()}
	second := op.Replica(secondLeads.Load)
	lb := newBalancer(t, op.Addr(), second) // the first connection goes to the follower

	started := time.Now()
	p := s.startWith([]string{deploycmd.EnvServer + "=" + lb.url()}, "run", "--group", operatortest.GroupName, "--instance", operatortest.Instance,
		"--ttl", "6", "--wait", "20s", "--", "sh", "-c", `touch "$OUT/started"; sleep 6`)
	s.waitFile("started", 20*time.Second)
	acquiredIn := time.Since(started)
	time.Sleep(time.Second)
	// The leader changes: the second replica stops leading, the first
	// takes over.
	secondLeads.Store(false)
	firstLeads.Store(true)
	if code := p.wait(t, 60*time.Second); code != deploycmd.ExitOK {
		t.Fatalf("exit %d, want 0", code)
	}
	notLeader := 0
	for _, c := range rec.all() {
		if c.status == http.StatusServiceUnavailable {
			notLeader++
		}
	}
	if notLeader == 0 {
		t.Fatal("no request reached a follower: the balancer did not do its job")
	}
	t.Logf("acquired %s after the start; %d answers were 503 not_leader; dials per backend: first %d, second %d",
		acquiredIn.Round(time.Millisecond), notLeader, lb.count(op.Addr()), lb.count(second))
}

func (b *balancer) count(backend string) int64 {
	n, ok := b.dials.Load(backend)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

// olderOperator emulates an operator from before the lease GET and the
// phase: the lease GET answers 405, a renewal carrying a phase 400.
func olderOperator(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/leases/") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusMethodNotAllowed)
			_, _ = w.Write([]byte(`{"error":"method_not_allowed"}`))
			return
		}
		if r.Method == http.MethodPut {
			body, _ := io.ReadAll(r.Body)
			if strings.Contains(string(body), `"phase"`) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write([]byte(`{"error":"bad_request","message":"json: unknown field \"phase\""}`))
				return
			}
			r.Body = io.NopCloser(strings.NewReader(string(body)))
		}
		h.ServeHTTP(w, r)
	})
}

// A new client against an older operator says so, and completes on its
// heartbeat alone: mark-ddl is confirmed by a plain renewal.
func TestANewClientAgainstAnOlderOperatorFallsBackToTheHeartbeat(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	op := operatortest.Start(t, env, operatortest.Options{Wrap: func(h http.Handler) http.Handler { return rec.wrap(olderOperator(h)) }})
	s := &scene{t: t, op: op, rec: rec, dir: t.TempDir(), tokenFile: op.TokenFile()}
	code, p := s.run(60*time.Second, "run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--ttl", "6", "--",
		"sh", "-c", `"$BR" deploy mark-ddl && touch "$OUT/marked" && sleep 3`)
	if code != deploycmd.ExitOK {
		t.Fatalf("exit %d, want 0", code)
	}
	out := p.stderr.String()
	for _, want := range []string{"does not serve the lease GET (it answered 405 method_not_allowed)", "does not record a migration's phase"} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr does not say %q", want)
		}
	}
	if !fileExists(s.dir + "/marked") {
		t.Fatal("mark-ddl failed against the older operator")
	}
}

// mark-ddl returns only once the operator confirmed the phase: while every
// renewal carrying it is refused (423), mark-ddl exits non-zero (the shell
// ignores SIGTERM so that it records mark-ddl's exit whatever ends it), and
// the run, past its DDL marker, ends as lost after the boundary.
func TestMarkDDLFailsWhenTheOperatorCannotConfirmThePhase(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	refusePhase := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut {
				body, _ := io.ReadAll(r.Body)
				if strings.Contains(string(body), `"phase":"ddl"`) {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusLocked)
					_, _ = w.Write([]byte(`{"error":"unstable","retryAfterSeconds":1}`))
					return
				}
				r.Body = io.NopCloser(strings.NewReader(string(body)))
			}
			h.ServeHTTP(w, r)
		})
	}
	op := operatortest.Start(t, env, operatortest.Options{Wrap: func(h http.Handler) http.Handler { return rec.wrap(refusePhase(h)) }})
	s := &scene{t: t, op: op, rec: rec, dir: t.TempDir(), tokenFile: op.TokenFile()}
	code, _ := s.run(60*time.Second, "run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--ttl", "6", "--",
		"sh", "-c", `trap '' TERM; "$BR" deploy mark-ddl; echo $? > "$OUT/mark-exit"; sleep 30`)
	if got := strings.TrimSpace(s.read("mark-exit")); got == "0" || got == "" {
		t.Fatalf("mark-ddl exited %q while the operator refused the phase", got)
	}
	if code != deploycmd.ExitLostAfterDDL {
		t.Fatalf("exit %d, want %d", code, deploycmd.ExitLostAfterDDL)
	}
}

// The phase is in the Lease record: ddl once mark-ddl returned, done once
// the run confirmed its success.
func TestThePhaseIsRecordedInTheLease(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	p := s.start("run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--ttl", "6", "--operation-id", "op-phase", "--",
		"sh", "-c", `"$BR" deploy mark-ddl && touch "$OUT/marked" && while [ ! -e "$OUT/go" ]; do sleep 0.05; done`)
	s.waitFile("marked", 30*time.Second)
	if got := s.migrationPhase(); got != leases.PhaseDDL {
		t.Fatalf("after mark-ddl the Lease records phase %q, want ddl", got)
	}
	if err := writeFile(s.dir+"/go", ""); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != deploycmd.ExitOK {
		t.Fatalf("exit %d", code)
	}
	if got := s.migrationPhase(); got != leases.PhaseDone {
		t.Fatalf("after the run the Lease records phase %q, want done", got)
	}
}

func (s *scene) migrationPhase() leases.Phase {
	s.t.Helper()
	var l coordinationv1.Lease
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: s.op.Namespace, Name: leases.MigrationName(operatortest.GroupName)}, &l); err != nil {
		s.t.Fatal(err)
	}
	rec, err := leasestore.Decode(&l)
	if err != nil {
		s.t.Fatal(err)
	}
	b, _ := json.Marshal(rec.State)
	s.t.Logf("migration Lease: state %s, phase %q", b, rec.Phase)
	return rec.Phase
}

// A run succeeds only if authority was confirmed after its command ended.
// The defect this pins: a run with ttl 120 whose leases were revoked while
// its command ran printed "succeeded" and exited 0, because it checked only
// its own deadlines. Here the lease GET is not served (an older operator),
// so nothing tells the run of the revocation before the command ends; the
// confirming renewal (phase done) then answers 409 revoked, and the run
// exits 4, its outcome file says lost-before-ddl.
func TestSuccessNeedsAConfirmationAfterTheCommandEnded(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	op := operatortest.Start(t, env, operatortest.Options{Wrap: func(h http.Handler) http.Handler { return rec.wrap(olderOperator(h)) }})
	s := &scene{t: t, op: op, rec: rec, dir: t.TempDir(), tokenFile: op.TokenFile()}
	outcome := s.dir + "/outcome.json"
	p := s.start("run", "--group", operatortest.GroupName, "--instance", operatortest.Instance, "--ttl", "120", "--outcome-file", outcome, "--",
		"sh", "-c", `touch "$OUT/started"; while [ ! -e "$OUT/go" ]; do sleep 0.05; done`)
	s.waitFile("started", 30*time.Second)
	s.op.RevokeAll()
	waitUntil(t, 30*time.Second, "the revocation", func() bool { return len(s.observe().Leases) == 0 })
	if err := writeFile(s.dir+"/go", ""); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 60*time.Second); code != deploycmd.ExitLostBeforeDDL {
		t.Fatalf("exit %d, want %d: a run whose authority was revoked during its command must not succeed", code, deploycmd.ExitLostBeforeDDL)
	}
	var rec2 struct{ Outcome string }
	if err := json.Unmarshal([]byte(s.read("outcome.json")), &rec2); err != nil || rec2.Outcome != "lost-before-ddl" {
		t.Fatalf("outcome file %q (%v), want lost-before-ddl", s.read("outcome.json"), err)
	}
	if !strings.Contains(p.stderr.String(), "AUTHORITY NOT CONFIRMED after the command ended") {
		t.Fatal("stderr does not say why")
	}
}

func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
