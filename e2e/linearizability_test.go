package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/internal/scene"
)

// neverReturned is the return time of a request that got no answer that
// says whether it took effect: the checker may place it anywhere after its
// call, or after everything (it never happened).
const neverReturned = int64(1) << 62

// history records the operations of concurrent clients.
type history struct {
	mu  sync.Mutex
	ops []porcupine.Operation
	// answers counts every answer, also those left out of the history
	// (503 not_leader: refused before anything, so no effect).
	answers map[string]int
	// timeline is every answer (or transport error) with the time it came.
	timeline []answer
}

// answer is one response as a client saw it.
type answer struct {
	// call is when the request was sent, at when its answer came.
	call, at time.Time
	verb     string
	// status is 0 for a transport error (nothing came back).
	status int
	code   string
}

func (h *history) add(client int, in mutexInput, call int64, out mutexOutput, ret int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

func (h *history) count(a answer) {
	h.mu.Lock()
	h.answers[fmt.Sprintf("%s %d %s", a.verb, a.status, a.code)]++
	h.timeline = append(h.timeline, a)
	h.mu.Unlock()
}

// sentBetween returns the answers to requests sent at or after from that
// came before to: requests that started and ended inside [from, to).
func (h *history) sentBetween(from, to time.Time) []answer {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []answer
	for _, a := range h.timeline {
		if !a.call.Before(from) && a.at.Before(to) {
			out = append(out, a)
		}
	}
	return out
}

// firstSuccessAfter is the first 2xx answer at or after t (zero if none).
func (h *history) firstSuccessAfter(t time.Time) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	var first time.Time
	for _, a := range h.timeline {
		if a.status >= 200 && a.status < 300 && !a.at.Before(t) && (first.IsZero() || a.at.Before(first)) {
			first = a.at
		}
	}
	return first
}

// mutexClient is one pipeline: grant an operation (retrying the same
// operation until a definite answer), renew it three times, release it
// (retrying until definite), next operation.
type mutexClient struct {
	t      *testing.T
	id     int
	c      *tlsClient
	api    string
	h      *history
	unexp  func(string)
	grants atomic.Int64 // read by the test while the client runs
	// renewals per operation (default 3) and the pause before each.
	renewals   int
	renewPause time.Duration
}

// do sends one request and records it; ok is false when the answer says
// nothing took effect (not_leader), which is not part of the history.
func (m *mutexClient) do(in mutexInput) mutexOutput {
	var method, url string
	var body any
	var headers []string
	switch in.verb {
	case "grant":
		method, url, body = http.MethodPost, m.api+"/leases", map[string]any{"kind": "migration", "operationId": in.op, "instance": devenv.DatabaseName, "ttlSeconds": 120}
	case "renew":
		method, url, body = http.MethodPut, m.api+"/leases/migration/"+in.op, map[string]any{"token": in.token}
	case "release":
		method, url, headers = http.MethodDelete, m.api+"/leases/migration/"+in.op, []string{"X-Lease-Token", in.token}
	}
	call := time.Now().UnixNano()
	st, resp, err := m.c.doJSON(method, url, body, headers...)
	ret := time.Now().UnixNano()
	code, _ := resp["error"].(string)
	var dial *net.OpError
	switch {
	case errors.Is(err, scene.ErrNotJSON):
		m.unexp(fmt.Sprintf("%s %s: %v", in.verb, in.op, err))
		return mutexOutput{outcome: "not_leader"}
	case errors.As(err, &dial) && dial.Op == "dial":
		code = "not connected"
	case err != nil:
		st, code = 0, "transport error"
	}
	m.h.count(answer{call: time.Unix(0, call), at: time.Unix(0, ret), verb: in.verb, status: st, code: code})
	var out mutexOutput
	switch {
	case st == http.StatusServiceUnavailable && code == "not_leader", code == "not connected",
		// The pipelines share one ServiceAccount and retry every 30 ms: past
		// its fair share (docs/api.md) a request is refused before anything,
		// like a 423 for the client.
		st == http.StatusTooManyRequests && code == "rate_limited":
		// Refused before anything (or never sent): no effect.
		return mutexOutput{outcome: "not_leader"}
	case st == 0 || st >= 500:
		out, ret = mutexOutput{outcome: "unknown", status: st, answeredAt: ret}, neverReturned
	case st == http.StatusOK || st == http.StatusCreated || st == http.StatusNoContent:
		out = mutexOutput{outcome: "ok"}
		if in.verb == "grant" {
			out.token, _ = resp["token"].(string)
			m.grants.Add(1)
		}
	case st == http.StatusConflict && code == "held":
		holder, _ := resp["holder"].(map[string]any)
		op, _ := holder["operationId"].(string)
		out = mutexOutput{outcome: "held", holder: op}
	case st == http.StatusNotFound && code == "not_found":
		out = mutexOutput{outcome: "not_found"}
	case st == http.StatusForbidden && code == "token_mismatch":
		out = mutexOutput{outcome: "token_mismatch"}
	case st == http.StatusConflict && code == "revoked":
		out = mutexOutput{outcome: "revoked"}
	case st == http.StatusLocked && code == "unstable":
		out = mutexOutput{outcome: "unstable"}
	default:
		m.unexp(fmt.Sprintf("%s %s: %d %v", in.verb, in.op, st, resp))
		return mutexOutput{outcome: "not_leader"}
	}
	if in.verb == "grant" && out.outcome == "unstable" {
		// Withdrawn, or never written: a tentative grant and its withdrawal,
		// both within this window (the model, "A grant answered 423").
		attempt := fmt.Sprintf("%s@%d", in.op, call)
		m.h.add(m.id, mutexInput{verb: "tentative", op: in.op, attempt: attempt}, call, out, ret)
		m.h.add(m.id, mutexInput{verb: "withdraw", op: in.op, attempt: attempt}, call, out, ret)
		return out
	}
	m.h.add(m.id, in, call, out, ret)
	return out
}

func (m *mutexClient) run(ctx context.Context) {
	// After a failure the client waits as a pipeline would (503 carries no
	// Retry-After); every answer without a verdict stays open in the history
	// until its end, so fast retries through an outage would only multiply
	// what the checker must place.
	pause := func(out mutexOutput) {
		d := 30 * time.Millisecond
		if out.outcome == "unknown" || out.outcome == "not_leader" {
			d = 500 * time.Millisecond
		}
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	for n := 0; ctx.Err() == nil; n++ {
		op := fmt.Sprintf("c%d-%d", m.id, n)
		token, revoked := "", false
		for ctx.Err() == nil {
			out := m.do(mutexInput{verb: "grant", op: op})
			if out.outcome == "ok" {
				token = out.token
				break
			}
			if out.outcome == "revoked" { // terminal: a move revoked an earlier attempt's grant
				revoked = true
				break
			}
			pause(out) // held, unstable, unknown or no leader: ask again for the same operation
		}
		if revoked {
			continue
		}
		if token == "" {
			return
		}
		renewals := m.renewals
		if renewals == 0 {
			renewals = 3
		}
		for k := 0; k < renewals && ctx.Err() == nil; k++ {
			if m.renewPause > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(m.renewPause):
				}
			}
			out := m.do(mutexInput{verb: "renew", op: op, token: token})
			if out.outcome != "ok" && out.outcome != "unknown" && out.outcome != "not_leader" && out.outcome != "unstable" {
				break // revoked, not found, token mismatch: authority is gone
			}
			if out.outcome != "ok" {
				pause(out)
			}
		}
		for attempt := 0; ; attempt++ { // release even after the end: leave nothing held
			out := m.do(mutexInput{verb: "release", op: op, token: token})
			if out.outcome == "ok" || out.outcome == "token_mismatch" {
				break
			}
			if ctx.Err() != nil && attempt >= 60 {
				return // the playground is gone (the test failed): the lease lapses with it
			}
			time.Sleep(30 * time.Millisecond)
			if out.outcome == "unknown" || out.outcome == "not_leader" {
				time.Sleep(470 * time.Millisecond)
			}
		}
	}
}

// mutexRun is four pipelines contending for the playground group's mutex,
// recording one history.
type mutexRun struct {
	h       *history
	clients []*mutexClient
	stop    context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	unexp   []string
}

func startMutexClients(t *testing.T, p *devenv.Playground, cfg devenv.Config, opts ...func(*mutexClient)) *mutexRun {
	t.Helper()
	r := &mutexRun{h: &history{answers: map[string]int{}}}
	c := deployClient(t, p)
	ctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	t.Cleanup(stop)
	unexp := func(s string) { r.mu.Lock(); r.unexp = append(r.unexp, s); r.mu.Unlock() }
	r.clients = make([]*mutexClient, 4)
	for i := range r.clients {
		r.clients[i] = &mutexClient{t: t, id: i, c: c, api: groupAPI(cfg.TLSAddr), h: r.h, unexp: unexp}
		for _, o := range opts {
			o(r.clients[i])
		}
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.clients[i].run(ctx) }()
	}
	return r
}

func (r *mutexRun) grants() int64 {
	var n int64
	for _, m := range r.clients {
		n += m.grants.Load()
	}
	return n
}

// effectBound, when a scenario can tell, is the latest time an operation
// that was called at call and answered a 5xx at answeredAt can have taken
// effect; without one, such an operation stays open until the end of the
// history (it may have taken effect at any time after its call).
type effectBound func(call, answeredAt int64) int64

// finish stops the clients (each releases what it holds) and fails the test
// on an answer outside the model or a history that is not linearizable.
func (r *mutexRun) finish(t *testing.T, bound effectBound) {
	t.Helper()
	r.stop()
	r.wg.Wait()
	if len(r.unexp) > 0 {
		t.Fatalf("answers outside the model: %v", r.unexp)
	}
	bounded := 0
	for i := range r.h.ops {
		o := &r.h.ops[i]
		if out := o.Output.(mutexOutput); bound != nil && out.outcome == "unknown" && out.status != 0 {
			o.Return = bound(o.Call, out.answeredAt)
			bounded++
		}
	}
	if bounded > 0 {
		t.Logf("%d operations answered 5xx are bounded by the scenario (the rest stay open)", bounded)
	}
	if dump := os.Getenv("BLOODRAVEN_E2E_HISTORY"); dump != "" {
		var lines []string
		for _, o := range r.h.ops {
			in, out := o.Input.(mutexInput), o.Output.(mutexOutput)
			lines = append(lines, fmt.Sprintf("%d %d %d %s %s %q %s %q %q %d %d", o.ClientId, o.Call, o.Return, in.verb, in.op, in.token, out.outcome, out.token, out.holder, out.status, out.answeredAt))
		}
		_ = os.WriteFile(dump, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
	}
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(mutexModel, r.h.ops, time.Minute)
	if res != porcupine.Ok {
		dir := os.Getenv("BLOODRAVEN_E2E_KEEP")
		if dir == "" {
			dir = t.TempDir()
		}
		out := fmt.Sprintf("%s/linearizability.html", dir)
		_ = porcupine.VisualizePath(mutexModel, info, out)
		// The visualization is lost with a clean clone's CI: the log keeps
		// what a diagnosis needs, the operations around each move.
		for _, l := range aroundMoves(r.h.ops, 1500*time.Millisecond) {
			t.Log(l)
		}
		for _, l := range stuckAt(r.h.ops, info) {
			t.Log(l)
		}
		t.Fatalf("history of %d operations: %s (visualization: %s); answers: %v", len(r.h.ops), res, out, r.h.answers)
	}
	t.Logf("%d operations by %d clients are linearizable (checked in %v); answers: %v",
		len(r.h.ops), len(r.clients), time.Since(start).Round(time.Millisecond), r.h.answers)
}

// disturbWhileContending runs the four pipelines for 5 s, calls disturb,
// lets them run on until grants resume (at most 90 s) and 3 s more, and
// checks the history; there must be grants both before the disturbance and
// after it.
func disturbWhileContending(t *testing.T, p *devenv.Playground, cfg devenv.Config, disturb func(), bound effectBound) *mutexRun {
	t.Helper()
	r := startMutexClients(t, p, cfg)
	time.Sleep(5 * time.Second)
	before := r.grants()
	disturb()
	// Run on until grants resume (the operator may be restarting and
	// waiting for its leader Lease), then a little longer.
	resumed := r.grants()
	_ = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		return r.grants() > resumed, nil // no progress within 90 s fails below
	})
	time.Sleep(3 * time.Second)
	after := r.grants() - before
	if before == 0 || after == 0 {
		r.stop()
		t.Fatalf("grants before the disturbance %d, after %d: the history shows no progress", before, after)
	}
	r.finish(t, bound)
	t.Logf("grants: %d before the disturbance, %d after it", before, after)
	return r
}

// Four pipelines contend for the mutex while the leading operator is killed
// (SIGKILL) and its restarted self takes over: the history of grants,
// renewals and releases must be linearizable against the contract's
// sequential model. Two holders, or a rotated-out token that still renews,
// would not be.
func TestMutexHistoryIsLinearizableAcrossALeaderKill(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	ctx := context.Background()
	p, cfg := upPlayground(t)
	disturbWhileContending(t, p, cfg, func() {
		if err := p.Operator().Kill(); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		restarted, err := p.WaitRestart(ctx, 0, 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.WaitLeader(ctx, restarted, 60*time.Second); err != nil {
			t.Fatal(err)
		}
		t.Logf("a leader again %v after the SIGKILL", time.Since(killed).Round(time.Millisecond))
	}, nil)
}

// stuckAt describes where the checker got stuck: the last operations of
// the longest partial linearization it found, then the operations (held
// answers too) called earliest among those it could not place after them,
// with times in milliseconds from the last placed operation's call.
func stuckAt(ops []porcupine.Operation, info porcupine.LinearizationInfo) []string {
	var longest []porcupine.Operation
	for _, partition := range info.PartialLinearizationsOperations() {
		for _, lin := range partition {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
	}
	if len(longest) == 0 {
		return []string{"no partial linearization"}
	}
	placed := make(map[[2]int64]bool, len(longest))
	key := func(o porcupine.Operation) [2]int64 { return [2]int64{int64(o.ClientId), o.Call} }
	for _, o := range longest {
		placed[key(o)] = true
	}
	zero := longest[len(longest)-1].Call
	line := func(o porcupine.Operation) string {
		in, out := o.Input.(mutexInput), o.Output.(mutexOutput)
		return fmt.Sprintf("  client %d %s(%s, token %s) [%+d, %+d] ms -> %s token %s holder %q gen %d status %d",
			o.ClientId, in.verb, in.op, tokenPrefix(in.token), (o.Call-zero)/1e6, (o.Return-zero)/1e6,
			out.outcome, tokenPrefix(out.token), out.holder, out.gen, out.status)
	}
	lines := []string{fmt.Sprintf("the longest partial linearization places %d of %d operations; its last ones:", len(longest), len(ops))}
	for _, o := range longest[max(0, len(longest)-12):] {
		lines = append(lines, line(o))
	}
	var rest []porcupine.Operation
	for _, o := range ops {
		if !placed[key(o)] {
			rest = append(rest, o)
		}
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].Call < rest[j].Call })
	lines = append(lines, "the first operations it could not place after them:")
	for _, o := range rest[:min(12, len(rest))] {
		lines = append(lines, line(o))
	}
	return lines
}

// aroundMoves describes, for each move of a history, the operations other
// than "held" answers that overlap the move's window widened by margin,
// with times in milliseconds from the move's call.
func aroundMoves(ops []porcupine.Operation, margin time.Duration) []string {
	var lines []string
	for _, m := range ops {
		if m.Input.(mutexInput).verb != "move" {
			continue
		}
		lines = append(lines, fmt.Sprintf("move -> generation %d: called, returned at +%d ms",
			m.Output.(mutexOutput).gen, (m.Return-m.Call)/1e6))
		from, to := m.Call-margin.Nanoseconds(), m.Return+margin.Nanoseconds()
		for _, o := range ops {
			in, out := o.Input.(mutexInput), o.Output.(mutexOutput)
			if in.verb == "move" || out.outcome == "held" || o.Return < from || o.Call > to {
				continue
			}
			lines = append(lines, fmt.Sprintf("  client %d %s(%s, token %s) [%+d, %+d] ms -> %s token %s holder %q status %d",
				o.ClientId, in.verb, in.op, tokenPrefix(in.token), (o.Call-m.Call)/1e6, (o.Return-m.Call)/1e6,
				out.outcome, tokenPrefix(out.token), out.holder, out.status))
		}
	}
	return lines
}

// tokenPrefix names a token in a log line without printing it whole.
func tokenPrefix(s string) string {
	if len(s) > 6 {
		return s[:6]
	}
	return s
}

// The outage is judged on the requests sent after the API server was gone:
// one in flight at the kill may be answered later, and successfully (its
// write landed first), however long after the kill its answer comes.
func TestAnOutageJudgesOnlyTheRequestsSentDuringIt(t *testing.T) {
	stopped := time.Unix(1000, 0)
	restarting := stopped.Add(10 * time.Second)
	h := &history{answers: map[string]int{}}
	for _, a := range []answer{
		{call: stopped.Add(-50 * time.Millisecond), at: stopped.Add(1100 * time.Millisecond), verb: "release", status: 204},
		{call: stopped.Add(100 * time.Millisecond), at: stopped.Add(150 * time.Millisecond), verb: "grant", status: 503, code: "unavailable"},
		{call: stopped.Add(2 * time.Second), at: stopped.Add(2100 * time.Millisecond), verb: "renew", status: 0},
		{call: restarting.Add(-time.Second), at: restarting.Add(time.Second), verb: "grant", status: 201},
	} {
		h.count(a)
	}
	got := h.sentBetween(stopped, restarting)
	if len(got) != 2 || got[0].verb != "grant" || got[1].verb != "renew" {
		t.Fatalf("judged %+v, want the grant and the renewal sent during the outage", got)
	}
}
