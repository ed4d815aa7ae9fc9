package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/shipstream/bloodraven/devenv"
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
}

func (h *history) add(client int, in mutexInput, call int64, out mutexOutput, ret int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	in.id = len(h.ops)
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

func (h *history) count(key string) {
	h.mu.Lock()
	h.answers[key]++
	h.mu.Unlock()
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
	st, resp, err := m.c.do(method, url, body, headers...)
	ret := time.Now().UnixNano()
	code, _ := resp["error"].(string)
	var dial *net.OpError
	if errors.As(err, &dial) && dial.Op == "dial" {
		code = "not connected"
	}
	m.h.count(fmt.Sprintf("%s %d %s", in.verb, st, code))
	var out mutexOutput
	switch {
	case st == http.StatusServiceUnavailable && code == "not_leader", code == "not connected":
		// Refused before anything (or never sent): no effect.
		return mutexOutput{outcome: "not_leader"}
	case st == 0 || st >= 500:
		out, ret = mutexOutput{outcome: "unknown"}, neverReturned
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
	default:
		m.unexp(fmt.Sprintf("%s %s: %d %v", in.verb, in.op, st, resp))
		return mutexOutput{outcome: "not_leader"}
	}
	m.h.add(m.id, in, call, out, ret)
	return out
}

func (m *mutexClient) run(ctx context.Context) {
	pause := func() {
		select {
		case <-ctx.Done():
		case <-time.After(30 * time.Millisecond):
		}
	}
	for n := 0; ctx.Err() == nil; n++ {
		op := fmt.Sprintf("c%d-%d", m.id, n)
		token := ""
		for ctx.Err() == nil {
			out := m.do(mutexInput{verb: "grant", op: op})
			if out.outcome == "ok" {
				token = out.token
				break
			}
			pause() // held, unknown or no leader: ask again for the same operation
		}
		if token == "" {
			return
		}
		for k := 0; k < 3 && ctx.Err() == nil; k++ {
			if out := m.do(mutexInput{verb: "renew", op: op, token: token}); out.outcome != "ok" && out.outcome != "unknown" && out.outcome != "not_leader" {
				break
			}
		}
		for { // release even after the end: leave nothing held
			out := m.do(mutexInput{verb: "release", op: op, token: token})
			if out.outcome == "ok" || out.outcome == "token_mismatch" {
				break
			}
			time.Sleep(30 * time.Millisecond)
		}
	}
}

// Four pipelines contend for the mutex while the leading operator is killed
// (SIGKILL) and its restarted self takes over: the history of grants,
// renewals and releases must be linearizable against the contract's
// sequential model. Two holders, or a rotated-out token that still renews,
// would not be.
func TestMutexHistoryIsLinearizableAcrossALeaderKill(t *testing.T) {
	ctx := context.Background()
	p, cfg := upPlayground(t)
	c := deployClient(t, p)
	h := &history{answers: map[string]int{}}
	var unexpected []string
	var mu sync.Mutex
	unexp := func(s string) { mu.Lock(); unexpected = append(unexpected, s); mu.Unlock() }
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	clients := make([]*mutexClient, 4)
	for i := range clients {
		clients[i] = &mutexClient{t: t, id: i, c: c, api: "https://" + cfg.TLSAddr + "/deploy/v1/groups/" + devenv.GroupName, h: h, unexp: unexp}
		wg.Add(1)
		go func() { defer wg.Done(); clients[i].run(runCtx) }()
	}
	time.Sleep(5 * time.Second)
	var before int64
	for _, m := range clients {
		before += m.grants.Load()
	}
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
	led := time.Since(killed)
	time.Sleep(5 * time.Second)
	stop()
	wg.Wait()
	after := -before
	for _, m := range clients {
		after += m.grants.Load()
	}
	if len(unexpected) > 0 {
		t.Fatalf("answers outside the model: %v", unexpected)
	}
	if before == 0 || after == 0 {
		t.Fatalf("grants before the kill %d, after %d: the history shows no progress", before, after)
	}
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(mutexModel, h.ops, time.Minute)
	if res != porcupine.Ok {
		out := fmt.Sprintf("%s/linearizability.html", t.TempDir())
		_ = porcupine.VisualizePath(mutexModel, info, out)
		t.Fatalf("history of %d operations: %s (visualization: %s)", len(h.ops), res, out)
	}
	t.Logf("%d operations by 4 clients (%d grants before the SIGKILL, %d after; a leader again after %v) are linearizable (checked in %v); answers: %v",
		len(h.ops), before, after, led.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), h.answers)
}
