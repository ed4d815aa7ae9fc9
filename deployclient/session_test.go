package deployclient

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeClock is a manual Clock: time moves only with Step.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c       chan time.Time
	at      time.Time
	done    bool
	clock   *fakeClock
	stopped bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)} }

func (f *fakeClock) Now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }

func (f *fakeClock) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{c: make(chan time.Time, 1), at: f.now.Add(d), clock: f}
	if d <= 0 {
		t.done = true
		t.c <- f.now
	} else {
		f.timers = append(f.timers, t)
	}
	return t
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }
func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	was := !t.done && !t.stopped
	t.stopped = true
	return was
}

// Step moves the clock and fires the timers that came due.
func (f *fakeClock) Step(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	for _, t := range f.timers {
		if !t.done && !t.stopped && !t.at.After(f.now) {
			t.done = true
			t.c <- f.now
		}
	}
}

// pending counts the timers that have not fired or been stopped.
func (f *fakeClock) pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, t := range f.timers {
		if !t.done && !t.stopped {
			n++
		}
	}
	return n
}

// fakeAPI answers the deployment API's requests for one operation, as
// scripted by grant: what the n-th POST of a kind answers.
type fakeAPI struct {
	// live: the observation lists the operation's migration lease.
	live  bool
	mu    sync.Mutex
	posts map[string]int
	grant func(kind string, n int, w http.ResponseWriter) bool // false: default answer
	// renew, when set, is asked first about the n-th PUT of a kind: true
	// means it answered (or never will).
	renew func(kind string, n int, w http.ResponseWriter, r *http.Request) bool
	puts  map[string]int
	// ttl is the ttlSeconds every answer names; default 30.
	ttl    int
	calls  []string
	bodies []string
}

func (a *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	a.calls = append(a.calls, r.Method+" "+r.URL.Path)
	a.bodies = append(a.bodies, string(body))
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	lease := func(kind string, status int, token bool) {
		ttl := a.ttl
		if ttl == 0 {
			ttl = 30
		}
		m := map[string]any{"kind": kind, "operationId": "op", "instance": "db", "expiresAt": "2026-12-01T00:00:30Z", "topologyGeneration": 1, "ttlSeconds": ttl}
		if token {
			m["token"] = "lease-token-" + kind
		}
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(m)
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/deploy/v1/groups/g" && a.live:
		_, _ = w.Write([]byte(`{"group":"g","namespace":"n","topologyGeneration":1,"leases":[{"kind":"migration","operationId":"op","instance":"db","expiresAt":"2026-12-01T00:00:30Z","topologyGeneration":1}]}`))
	case r.Method == http.MethodGet && r.URL.Path == "/deploy/v1/groups/g":
		_, _ = w.Write([]byte(`{"group":"g","namespace":"n","topologyGeneration":1,"leases":[]}`))
	case r.Method == http.MethodPost:
		var req struct{ Kind string }
		_ = json.Unmarshal(body, &req)
		a.mu.Lock()
		if a.posts == nil {
			a.posts = map[string]int{}
		}
		a.posts[req.Kind]++
		n := a.posts[req.Kind]
		a.mu.Unlock()
		if a.grant != nil && a.grant(req.Kind, n, w) {
			return
		}
		lease(req.Kind, http.StatusCreated, true)
	case r.Method == http.MethodPut:
		kind := "migration"
		if strings.Contains(r.URL.Path, "/failover-hold/") {
			kind = "failover-hold"
		}
		a.mu.Lock()
		if a.puts == nil {
			a.puts = map[string]int{}
		}
		a.puts[kind]++
		n := a.puts[kind]
		a.mu.Unlock()
		if a.renew != nil && a.renew(kind, n, w, r) {
			return
		}
		lease(kind, http.StatusOK, false)
	case r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
		_, _ = w.Write([]byte(`{"error":"method_not_allowed"}`))
	}
}

func (a *fakeAPI) requests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.calls...)
}

func fakeSession(t *testing.T, api *fakeAPI, clk Clock, takeOver bool) SessionConfig {
	t.Helper()
	srv := httptest.NewTLSServer(api)
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
	c, err := New(Config{Server: srv.URL, CAFile: ca, TokenFile: tok})
	if err != nil {
		t.Fatal(err)
	}
	return SessionConfig{Client: c, Group: "g", Instance: "db", OperationID: "op", TTL: 30 * time.Second, Clock: clk, TakeOver: takeOver, NoWatch: true}
}

// regrantFirst answers the first migration POST 200: a re-grant, so another
// runner held the operation.
func regrantFirst(kind string, n int, w http.ResponseWriter) bool {
	if kind != KindMigration || n != 1 {
		return false
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{"kind":"migration","operationId":"op","instance":"db","expiresAt":"2026-12-01T00:00:30Z","topologyGeneration":1,"ttlSeconds":30,"token":"t"}`))
	return true
}

type acquired struct {
	s   *Session
	err error
}

func acquireAsync(cfg SessionConfig) chan acquired {
	ch := make(chan acquired, 1)
	go func() { s, err := Acquire(context.Background(), cfg); ch <- acquired{s, err} }()
	return ch
}

// A take-over starts nothing before 120 s have passed on the session's own
// clock since the re-grant was answered, and keeps the lease renewed
// meanwhile.
func TestATakeOverWaitsTheMaximumTTLOnItsOwnClock(t *testing.T) {
	clk := newFakeClock()
	api := &fakeAPI{grant: regrantFirst}
	ch := acquireAsync(fakeSession(t, api, clk, true))
	waitFor(t, "the take-over's wait", func() bool { return clk.pending() >= 2 }) // the heartbeat's and the wait's timers
	for elapsed := time.Duration(0); elapsed < 115*time.Second; elapsed += 5 * time.Second {
		clk.Step(5 * time.Second)
		time.Sleep(20 * time.Millisecond) // let a due renewal go out and come back
		select {
		case a := <-ch:
			t.Fatalf("Acquire returned %s after the re-grant (%v): before the previous holder's deadline has certainly passed", elapsed+5*time.Second, a.err)
		default:
		}
	}
	clk.Step(6 * time.Second)
	var a acquired
	select {
	case a = <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("Acquire did not return once 120 s had passed")
	}
	if a.err != nil || !a.s.TookOver() {
		t.Fatalf("Acquire = %v, took over %v", a.err, a.s != nil && a.s.TookOver())
	}
	renewals := 0
	for _, c := range api.requests() {
		if strings.HasPrefix(c, "PUT ") {
			renewals++
		}
	}
	if renewals < 10 {
		t.Fatalf("%d renewals during a 120 s take-over of a 30 s lease; want one every 10 s", renewals)
	}
	_ = a.s.Release(context.Background(), nil)
}

// Without TakeOver, a re-grant on the first POST is another runner's
// operation: Acquire fails with OperationLiveError, starts nothing, renews
// the lease to the maximum ttl and never releases it.
func TestARegrantOnTheFirstPostIsAnotherRunner(t *testing.T) {
	api := &fakeAPI{grant: regrantFirst}
	_, err := Acquire(context.Background(), fakeSession(t, api, RealClock{}, false))
	var live *OperationLiveError
	if !errors.As(err, &live) || !live.ReGranted {
		t.Fatalf("Acquire = %v, want an OperationLiveError (re-granted)", err)
	}
	var sawMax bool
	for i, c := range api.requests() {
		if strings.HasPrefix(c, "DELETE ") {
			t.Fatalf("the re-granted lease was released (%s): another operation could start beside the other runner", c)
		}
		if strings.HasPrefix(c, "PUT ") && strings.Contains(api.bodies[i], `"ttlSeconds":120`) {
			sawMax = true
		}
	}
	if !sawMax {
		t.Fatalf("the re-granted lease was not renewed to 120 s: %v", api.requests())
	}
}

// A 200 that answers the retry of a grant whose answer was lost is
// contested: the lost attempt may have created the lease (the 200 is the
// session's own), or re-granted another runner's live operation (its token
// no longer works, but its command may run until its deadline), and the
// answers are the same. So it is handled like a 200 on the first attempt:
// without TakeOver not acquired and left to lapse, with it a 120 s wait,
// at phase ddl refused for good. A 201 after a lost answer proves nothing
// was live: acquired at once. The re-grant a failed acquisition sends to
// learn the token of a lost grant is held to the same rule: its 200 is
// never released.
func TestARegrantAfterALostAnswerIsContested(t *testing.T) {
	type want int
	const (
		wantAcquired want = iota
		wantTookOver
		wantLive
		wantUncertainDDL
		wantFailed
	)
	cases := []struct {
		name     string
		grant    func(kind string, n int, w http.ResponseWriter) bool
		takeOver bool
		wait     time.Duration
		want     want
	}{
		{"200 after a lost answer, no take-over: not acquired, left to lapse", lostFirstThen(http.StatusOK, "pre-ddl"), false, time.Minute, wantLive},
		{"200 after a lost answer, take-over: waits the maximum ttl", lostFirstThen(http.StatusOK, "pre-ddl"), true, time.Minute, wantTookOver},
		{"200 at phase ddl after a lost answer, take-over: refused for good", lostFirstThen(http.StatusOK, "ddl"), true, time.Minute, wantUncertainDDL},
		{"201 after a lost answer: nothing was live, acquired at once", lostFirstThen(http.StatusCreated, "pre-ddl"), false, time.Minute, wantAcquired},
		{"a failed acquisition's re-grant answered 200 is not released", lostFirstThen(http.StatusOK, "pre-ddl"), false, 0, wantFailed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			start := clk.Now()
			api := &fakeAPI{grant: tc.grant}
			cfg := fakeSession(t, api, clk, tc.takeOver)
			cfg.Wait = tc.wait
			ch := acquireAsync(cfg)
			// Fake time moves 1 s per real 5 ms until Acquire returns (at
			// most 10 fake minutes).
			var a acquired
		loop:
			for i := 0; ; i++ {
				select {
				case a = <-ch:
					break loop
				case <-time.After(5 * time.Millisecond):
				}
				if i > 600 {
					t.Fatal("Acquire never returned")
				}
				clk.Step(time.Second)
			}
			elapsed := clk.Now().Sub(start)
			if a.s != nil {
				defer func() { _ = a.s.Release(context.Background(), nil) }()
			}
			var live *OperationLiveError
			var ud *UncertainDDLError
			switch tc.want {
			case wantAcquired:
				if a.err != nil || a.s.TookOver() || elapsed >= MaxTTL {
					t.Fatalf("Acquire = %v (took over %v) after %s, want the session's own grant at once", a.err, a.s != nil && a.s.TookOver(), elapsed)
				}
				return
			case wantTookOver:
				if a.err != nil || !a.s.TookOver() {
					t.Fatalf("Acquire = %v, want a take-over", a.err)
				}
				if elapsed < MaxTTL {
					t.Fatalf("the take-over returned after %s: before a previous runner's deadline has certainly passed", elapsed)
				}
				return
			case wantLive:
				if !errors.As(a.err, &live) || !live.ReGranted || !live.AfterLostAnswer {
					t.Fatalf("Acquire = %v, want an OperationLiveError (re-granted after a lost answer)", a.err)
				}
				if !strings.Contains(live.Error(), "cannot tell") {
					t.Errorf("the error does not say that the answer is ambiguous: %v", live)
				}
			case wantUncertainDDL:
				var acq *AcquireError
				if !errors.As(a.err, &ud) || !errors.As(a.err, &acq) || !acq.Permanent() {
					t.Fatalf("Acquire = %v, want a permanent UncertainDDLError", a.err)
				}
			case wantFailed:
				if a.err == nil {
					t.Fatal("Acquire succeeded with Wait 0 after a lost answer")
				}
			}
			assertLeftToLapse(t, api)
		})
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s never came", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lostFirstThenRegrant: the first migration POST is granted and its answer
// lost on the way; the retry is answered 200 (the same operation's lease,
// at phase).
func lostFirstThenRegrant(phase string) func(kind string, n int, w http.ResponseWriter) bool {
	return lostFirstThen(http.StatusOK, phase)
}

// lostFirstThen: the first migration POST gets no answer (the connection
// is closed); every later one is answered status (200 re-grant, 201 new)
// with the lease at phase.
func lostFirstThen(status int, phase string) func(kind string, n int, w http.ResponseWriter) bool {
	return func(kind string, n int, w http.ResponseWriter) bool {
		if kind != KindMigration {
			return false
		}
		if n == 1 {
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			conn.Close()
			return true
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"kind":"migration","operationId":"op","instance":"db","expiresAt":"2026-12-01T00:00:30Z","topologyGeneration":1,"ttlSeconds":30,"token":"t","phase":"` + phase + `"}`))
		return true
	}
}

// The observation showed the operation live: a later 200 is the other
// runner's operation even after an unanswered attempt, so a take-over
// still waits.
func TestAnOperationSeenLiveIsTakenOverEvenAfterALostAnswer(t *testing.T) {
	clk := newFakeClock()
	api := &fakeAPI{live: true, grant: lostFirstThenRegrant("pre-ddl")}
	cfg := fakeSession(t, api, clk, true)
	cfg.Wait = time.Minute
	ch := acquireAsync(cfg)
	waitFor(t, "the retry's backoff", func() bool { return clk.pending() >= 1 })
	clk.Step(10 * time.Second)
	time.Sleep(50 * time.Millisecond)
	select {
	case a := <-ch:
		t.Fatalf("Acquire returned at once (%v): the operation was seen live under another runner", a.err)
	default:
	}
	for i := 0; i < 25; i++ {
		clk.Step(5 * time.Second)
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case a := <-ch:
		if a.err != nil || !a.s.TookOver() {
			t.Fatalf("Acquire = %v, want a take-over", a.err)
		}
		_ = a.s.Release(context.Background(), nil)
	case <-time.After(5 * time.Second):
		t.Fatal("the take-over never ended")
	}
}

// A take-over cut short (a signal during the 120 s wait) never releases the
// re-granted mutex: it is renewed to 120 s and left to lapse.
func TestAnInterruptedTakeOverLeavesTheMutexToLapse(t *testing.T) {
	clk := newFakeClock()
	api := &fakeAPI{grant: regrantFirst}
	cfg := fakeSession(t, api, clk, true)
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { _, err := Acquire(ctx, cfg); ch <- err }()
	waitFor(t, "the take-over's wait", func() bool { return clk.pending() >= 2 })
	cancel()
	if err := <-ch; err == nil {
		t.Fatal("an interrupted take-over acquired")
	}
	assertLeftToLapse(t, api)
}

// A take-over of an operation whose record says ddl is refused for good: a
// second runner never resumes uncertain DDL.
func TestATakeOverNeverResumesUncertainDDL(t *testing.T) {
	api := &fakeAPI{grant: func(kind string, n int, w http.ResponseWriter) bool {
		if kind != KindMigration {
			return false
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"kind":"migration","operationId":"op","instance":"db","expiresAt":"2026-12-01T00:00:30Z","topologyGeneration":1,"ttlSeconds":30,"token":"t","phase":"ddl"}`))
		return true
	}}
	_, err := Acquire(context.Background(), fakeSession(t, api, RealClock{}, true))
	var ud *UncertainDDLError
	var acq *AcquireError
	if !errors.As(err, &ud) || !errors.As(err, &acq) || !acq.Permanent() {
		t.Fatalf("Acquire = %v, want a permanent UncertainDDLError", err)
	}
	assertLeftToLapse(t, api)
}

func assertLeftToLapse(t *testing.T, api *fakeAPI) {
	t.Helper()
	var renewedToMax bool
	for i, c := range api.requests() {
		if strings.HasPrefix(c, "DELETE ") && strings.Contains(c, "/migration/") {
			t.Fatalf("the contested mutex was released (%s)", c)
		}
		if strings.HasPrefix(c, "PUT ") && strings.Contains(c, "/migration/") && strings.Contains(api.bodies[i], `"ttlSeconds":120`) {
			renewedToMax = true
		}
	}
	if !renewedToMax {
		t.Fatalf("the contested mutex was not renewed to 120 s: %v", api.requests())
	}
}

// Only a request that may have been written can have granted something.
func TestOnlyAnAttemptThatMayHaveBeenWrittenIsAmbiguous(t *testing.T) {
	cases := map[string]struct {
		err  error
		want bool
	}{
		"connection refused at dial": {&url.Error{Op: "Post", URL: "https://x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}, false},
		"reset while reading":        {&url.Error{Op: "Post", URL: "https://x", Err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}}, true},
		"EOF before the answer":      {&url.Error{Op: "Post", URL: "https://x", Err: io.EOF}, true},
		"503 unavailable":            {&APIError{Status: 503, Code: CodeUnavailable}, true},
		"503 not_leader":             {&APIError{Status: 503, Code: CodeNotLeader}, false},
		"409 held":                   {&APIError{Status: 409, Code: CodeHeld}, false},
		"no error":                   {nil, false},
	}
	for name, tc := range cases {
		if got := ambiguousAnswer(tc.err); got != tc.want {
			t.Errorf("%s: ambiguous = %v, want %v", name, got, tc.want)
		}
	}
}

// A renewal that gets no answer at all (sent to a replica that went away,
// on an address the Service routed to a moment before) is given half the
// time left before the loss moment, then sent again on a new connection:
// the lease is kept. Given the whole budget, that one attempt lost it.
func TestARenewalWithoutAnAnswerIsSentAgainBeforeTheLeaseIsLost(t *testing.T) {
	api := &fakeAPI{ttl: 6, renew: func(kind string, n int, w http.ResponseWriter, r *http.Request) bool {
		if kind != KindMigration || n != 1 {
			return false
		}
		<-r.Context().Done() // no answer: the client gives up and closes the connection
		return true
	}}
	cfg := fakeSession(t, api, RealClock{}, false)
	cfg.TTL = 6 * time.Second
	s, err := Acquire(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Release(context.Background(), nil) }()
	// The first renewal goes at 2 s and gets no answer; the loss moment is
	// at 6 s. Wait past it.
	select {
	case <-s.Lost():
		t.Fatalf("the lease was lost: %v (renewals: %v)", s.Err(), api.requests())
	case <-time.After(7 * time.Second):
	}
	if !s.Held() {
		t.Fatalf("the lease is not held after 7 s (renewals: %v)", api.requests())
	}
	api.mu.Lock()
	puts := api.puts[KindMigration]
	api.mu.Unlock()
	if puts < 2 {
		t.Errorf("%d migration renewals sent, want the unanswered one and another", puts)
	}
}

func TestARenewalAttemptGetsHalfTheTimeLeft(t *testing.T) {
	for _, c := range []struct {
		budget, want time.Duration
	}{
		{20 * time.Second, 10 * time.Second},
		{4 * time.Second, 2 * time.Second},
		{1500 * time.Millisecond, time.Second},
		{600 * time.Millisecond, 600 * time.Millisecond},
	} {
		if got := renewAttempt(c.budget); got != c.want {
			t.Errorf("renewAttempt(%s) = %s, want %s", c.budget, got, c.want)
		}
	}
}
