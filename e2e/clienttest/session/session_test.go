package session_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/shipstream/bloodraven/deployclient"
	"github.com/shipstream/bloodraven/internal/operatortest"
	"github.com/shipstream/bloodraven/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

// call is one request the operator answered.
type call struct {
	method, path string
	status       int
	tokenHash    [32]byte
	at           time.Time
}

// recorder wraps the deployment API and records every call; drop, when set,
// decides to run a request and then cut the connection before the answer
// (a lost answer).
type recorder struct {
	mu    sync.Mutex
	calls []call
	drop  func(r *http.Request) bool
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(s int) { w.status = s; w.ResponseWriter.WriteHeader(s) }

func (rec *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := call{method: r.Method, path: r.URL.Path, at: time.Now(),
			tokenHash: sha256.Sum256([]byte(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")))}
		rec.mu.Lock()
		drop := rec.drop != nil && rec.drop(r)
		rec.mu.Unlock()
		if drop {
			h.ServeHTTP(&discard{header: http.Header{}}, r)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			c.status = -1
		} else {
			sw := &statusWriter{ResponseWriter: w, status: 200}
			h.ServeHTTP(sw, r)
			c.status = sw.status
		}
		rec.mu.Lock()
		rec.calls = append(rec.calls, c)
		rec.mu.Unlock()
	})
}

func (rec *recorder) all() []call {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]call(nil), rec.calls...)
}

// discard is a ResponseWriter whose answer goes nowhere.
type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// scene is an operator, a recorder in front of its API, and a client with a
// token file of its own.
type scene struct {
	t         *testing.T
	op        *operatortest.Operator
	rec       *recorder
	tokenFile string
	client    *deployclient.Client
}

func newScene(t *testing.T, opts operatortest.Options) *scene {
	t.Helper()
	rec := &recorder{}
	opts.Wrap = rec.wrap
	op := operatortest.Start(t, env, opts)
	s := &scene{t: t, op: op, rec: rec, tokenFile: op.TokenFile()}
	c, err := deployclient.New(deployclient.Config{Server: op.URL, CAFile: op.CAFile, TokenFile: s.tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	s.client = c
	return s
}

func (s *scene) config(op string, ttl time.Duration) deployclient.SessionConfig {
	return deployclient.SessionConfig{Client: s.client, Group: operatortest.GroupName, Instance: operatortest.Instance,
		OperationID: op, TTL: ttl, Progress: func(m string) { s.t.Log("progress: " + m) }}
}

func (s *scene) acquire(op string, ttl time.Duration) *deployclient.Session {
	s.t.Helper()
	sess, err := deployclient.Acquire(context.Background(), s.config(op, ttl))
	if err != nil {
		s.t.Fatalf("acquire %s: %v", op, err)
	}
	return sess
}

// waitUntil polls cond until it holds, or fails the test after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(timeout); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no %s within %s", what, timeout)
		}
	}
}

// leaseOf is "kind/operationId" of a lease path.
func leaseOf(path string) string {
	parts := strings.Split(path, "/")
	return strings.Join(parts[len(parts)-2:], "/")
}

// waitLost waits for the session's loss and returns it.
func waitLost(t *testing.T, sess *deployclient.Session, within time.Duration) *deployclient.LostError {
	t.Helper()
	select {
	case <-sess.Lost():
	case <-time.After(within):
		t.Fatalf("the session was not lost within %s", within)
	}
	var lost *deployclient.LostError
	if !errors.As(sess.Err(), &lost) {
		t.Fatalf("Err() = %v, want a *LostError", sess.Err())
	}
	if c := context.Cause(sess.Context()); c != sess.Err() {
		t.Fatalf("context cause %v, want the loss", c)
	}
	return lost
}

func (s *scene) liveLeases() int {
	s.t.Helper()
	g, err := s.client.Observe(context.Background(), operatortest.GroupName)
	if err != nil {
		s.t.Fatal(err)
	}
	return len(g.Leases)
}

func TestSuccessReleasesTheHoldThenRecordsThenReleasesTheMutex(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	sess := s.acquire("op-ok", 6*time.Second)
	if got := s.liveLeases(); got != 2 {
		t.Fatalf("%d live leases after Acquire, want 2", got)
	}
	if sess.Generation() != 1 {
		t.Fatalf("grant generation %d, want 1", sess.Generation())
	}
	// Renewals run while the work runs: wait for two of each.
	renewals := func() map[string]int {
		n := map[string]int{}
		for _, c := range s.rec.all() {
			if c.method == http.MethodPut && c.status == 200 {
				n[leaseOf(c.path)]++
			}
		}
		return n
	}
	waitUntil(t, 30*time.Second, "2 renewals of each lease at ttl 6 s", func() bool {
		n := renewals()
		return n["migration/op-ok"] >= 2 && n["failover-hold/op-ok"] >= 2
	})
	var order []string
	recorded := func(context.Context) error {
		for _, c := range s.rec.all() {
			if c.method == http.MethodDelete {
				order = append(order, "DELETE "+leaseOf(c.path))
			}
		}
		order = append(order, "recorded")
		if n := s.liveLeases(); n != 1 {
			t.Errorf("%d live leases while the outcome is recorded, want 1 (the mutex)", n)
		}
		return nil
	}
	if err := sess.Release(context.Background(), recorded); err != nil {
		t.Fatal(err)
	}
	if sess.Err() != nil {
		t.Fatalf("Err() after a release = %v", sess.Err())
	}
	// Every DELETE in order, the outcome step where it ran: the DELETEs
	// seen by the step, then those after it.
	var all []string
	for _, c := range s.rec.all() {
		if c.method == http.MethodDelete {
			if c.status != http.StatusNoContent {
				t.Errorf("%s %s answered %d", c.method, c.path, c.status)
			}
			all = append(all, "DELETE "+leaseOf(c.path))
		}
	}
	got := append(order, all[len(order)-1:]...)
	want := []string{"DELETE failover-hold/op-ok", "recorded", "DELETE migration/op-ok"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("release order %v, want %v", got, want)
	}
	t.Logf("renewals before the release: %v", renewals())
	if got := s.liveLeases(); got != 0 {
		t.Fatalf("%d live leases after Release, want 0", got)
	}
}

func TestAFailedOutcomeRecordKeepsTheMutexUntilItLapses(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	sess := s.acquire("op-unrecorded", 5*time.Second)
	err := sess.Release(context.Background(), func(context.Context) error { return errors.New("the deploy log is unreachable") })
	if err == nil || !strings.Contains(err.Error(), "not released") {
		t.Fatalf("Release = %v, want the outcome error", err)
	}
	// The observation lists leases from the operator's cache, which may lag
	// the hold's release by a moment under load (seen in a full make test).
	var g *deployclient.Group
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		g, _ = s.client.Observe(ctx, operatortest.GroupName)
		return g != nil && len(g.Leases) == 1 && g.Leases[0].Kind == deployclient.KindMigration, nil
	})
	if err != nil {
		t.Fatalf("leases %+v, want the migration mutex alone (hold released, mutex left to lapse)", g)
	}
}

func TestUnstableAnswersKeepTheSessionOnlyUntilTheConfirmedDeadline(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	sess := s.acquire("op-423", 5*time.Second)
	s.op.SetTransition()
	set := time.Now()
	lost := waitLost(t, sess, 15*time.Second)
	at := time.Now()
	if lost.Cause != deployclient.CauseDeadlinePassed {
		t.Fatalf("lost: %v (cause %s), want deadline_passed", lost, lost.Cause)
	}
	var ae *deployclient.APIError
	if !errors.As(lost.Err, &ae) || ae.Status != http.StatusLocked {
		t.Fatalf("last answer %v, want 423 unstable", lost.Err)
	}
	// The session lived past the transition, but not past the deadline it
	// had confirmed before it; 423s never moved that deadline.
	if at.Before(lost.Deadline) {
		t.Fatalf("lost at %s, before the confirmed deadline %s", at, lost.Deadline)
	}
	if lost.Deadline.After(set.Add(5 * time.Second)) {
		t.Fatalf("confirmed deadline %s is more than a ttl after the transition (%s): a 423 extended it", lost.Deadline, set)
	}
	n423 := 0
	for _, c := range s.rec.all() {
		if c.method == http.MethodPut && c.status == http.StatusLocked {
			n423++
		}
	}
	if n423 < 2 {
		t.Fatalf("%d renewals answered 423, want the session to keep asking inside its deadline", n423)
	}
	t.Logf("423 answers: %d; lost %s after the transition, %s after the deadline", n423, at.Sub(set).Round(time.Millisecond), at.Sub(lost.Deadline).Round(time.Millisecond))
}

func TestServerClockAheadDoesNotExtendTheDeadline(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{Skew: 60 * time.Second})
	before := time.Now()
	sess := s.acquire("op-skew", 5*time.Second)
	g, err := s.client.Observe(context.Background(), operatortest.GroupName)
	if err != nil {
		t.Fatal(err)
	}
	expires, _ := time.Parse(time.RFC3339Nano, g.Leases[0].ExpiresAt)
	if expires.Before(before.Add(60 * time.Second)) {
		t.Fatalf("server expiresAt %s: the server's clock is not ahead", expires)
	}
	if d := sess.Deadline(deployclient.KindMigration); d.After(time.Now().Add(5 * time.Second)) {
		t.Fatalf("client deadline %s is past now+ttl although the server says %s", d, expires)
	}
	s.op.SetTransition()
	lost := waitLost(t, sess, 15*time.Second)
	if lost.Cause != deployclient.CauseDeadlinePassed {
		t.Fatalf("lost: %v, want deadline_passed", lost)
	}
	if !time.Now().Before(expires.Add(-50 * time.Second)) {
		t.Fatalf("lost only at %s; the server's expiresAt %s was honoured", time.Now(), expires)
	}
}

func TestAGenerationBumpLosesTheLeaseOnce(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	sess := s.acquire("op-bump", 5*time.Second)
	s.op.KillPrimary()
	s.op.WaitGeneration(2, 30*time.Second)
	lost := waitLost(t, sess, 10*time.Second)
	if lost.Cause != deployclient.CauseRevoked || lost.Reason != "topology_changed" || lost.Generation != 2 || lost.GrantGeneration != 1 {
		t.Fatalf("lost: %+v, want revoked topology_changed at generation 2", lost)
	}
	// Reported once: the loss stays the first one.
	time.Sleep(2 * time.Second)
	if sess.Err() != error(lost) {
		t.Fatalf("Err() changed to %v", sess.Err())
	}
	// Nothing POSTs past the revocation.
	posts := 0
	for _, c := range s.rec.all() {
		if c.method == http.MethodPost {
			posts++
		}
	}
	if posts != 2 {
		t.Fatalf("%d POSTs, want the 2 grants: the session must never re-grant past a revocation", posts)
	}
	if err := sess.Release(context.Background(), nil); err != nil {
		t.Fatalf("Release after a loss: %v", err)
	}
}

func TestTheRevokeAnnotationLosesTheLease(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	sess := s.acquire("op-revoked", 5*time.Second)
	s.op.RevokeAll()
	lost := waitLost(t, sess, 15*time.Second)
	if lost.Cause != deployclient.CauseRevoked || lost.Reason != "operator_revoked" {
		t.Fatalf("lost: %+v, want revoked operator_revoked", lost)
	}
	if !strings.Contains(lost.Error(), "operator_revoked") {
		t.Fatalf("message %q does not name the reason", lost.Error())
	}
}

func TestARotatedTokenFileIsPickedUp(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	old, err := os.ReadFile(s.tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	sess := s.acquire("op-rotate", 5*time.Second)
	// The kubelet rotates a projected token by swapping the file.
	fresh, _ := s.op.Token()
	tmp := filepath.Join(filepath.Dir(s.tokenFile), "rotating")
	if err := os.WriteFile(tmp, []byte(fresh), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, s.tokenFile); err != nil {
		t.Fatal(err)
	}
	rotated := time.Now()
	oldHash, newHash := sha256.Sum256(old), sha256.Sum256([]byte(fresh))
	var after, withNew, withOld int
	count := func() bool {
		after, withNew, withOld = 0, 0, 0
		for _, c := range s.rec.all() {
			if c.at.Before(rotated.Add(100 * time.Millisecond)) {
				continue
			}
			after++
			switch c.tokenHash {
			case newHash:
				withNew++
			case oldHash:
				withOld++
			}
		}
		return after >= 2 // a renewal of each lease
	}
	waitUntil(t, 30*time.Second, "two requests after the rotation", count)
	if after == 0 || withOld != 0 || withNew != after {
		t.Fatalf("after the rotation: %d requests, %d with the new token, %d with the old", after, withNew, withOld)
	}
	if sess.Err() != nil {
		t.Fatalf("the session was lost: %v", sess.Err())
	}
	_ = sess.Release(context.Background(), nil)
}

func TestASecondSessionWaitsForTheFirstThenProceeds(t *testing.T) {
	t.Parallel()
	s := newScene(t, operatortest.Options{})
	first := s.acquire("op-first", 5*time.Second)

	// A session that may not wait gives up with the holder named.
	cfg := s.config("op-impatient", 5*time.Second)
	cfg.Wait = time.Second
	_, err := deployclient.Acquire(context.Background(), cfg)
	var ae *deployclient.APIError
	var acq *deployclient.AcquireError
	if !errors.As(err, &acq) || !errors.As(err, &ae) || ae.Code != deployclient.CodeHeld || ae.Holder == nil || ae.Holder.OperationID != "op-first" {
		t.Fatalf("impatient Acquire: %v, want 409 held by op-first", err)
	}

	var mu sync.Mutex
	var progress []string
	cfg = s.config("op-second", 5*time.Second)
	cfg.Wait = time.Minute
	cfg.Progress = func(m string) { mu.Lock(); progress = append(progress, m); mu.Unlock() }
	type result struct {
		sess *deployclient.Session
		err  error
		at   time.Time
	}
	got := make(chan result, 1)
	go func() {
		sess, err := deployclient.Acquire(context.Background(), cfg)
		got <- result{sess, err, time.Now()}
	}()
	time.Sleep(3 * time.Second)
	select {
	case r := <-got:
		t.Fatalf("the second session acquired while the first held the mutex: %v", r.err)
	default:
	}
	released := time.Now()
	if err := first.Release(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("second Acquire: %v", r.err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(progress) == 0 || !strings.Contains(progress[0], "held by operation op-first (instance orders-app) until 20") {
		t.Fatalf("progress %q, want a line naming the holder and its expiry", progress)
	}
	t.Logf("second session acquired %s after the release; progress: %q", r.at.Sub(released).Round(time.Millisecond), progress[0])
	_ = r.sess.Release(context.Background(), nil)
}

// firstGrantUnanswered is an operator whose first grant is carried out but
// never answered (the connection is cut), and a client for it.
func firstGrantUnanswered(t *testing.T) (*recorder, *deployclient.Client) {
	t.Helper()
	rec := &recorder{}
	dropped := 0
	rec.drop = func(r *http.Request) bool {
		if r.Method == http.MethodPost && dropped == 0 {
			dropped++
			return true
		}
		return false
	}
	op := operatortest.Start(t, env, operatortest.Options{Wrap: rec.wrap})
	c, err := deployclient.New(deployclient.Config{Server: op.URL, CAFile: op.CAFile, TokenFile: op.TokenFile()})
	if err != nil {
		t.Fatal(err)
	}
	return rec, c
}

// The retry of a grant whose answer was lost re-grants the operation (200)
// with a new token, which the renewals then use. That 200 is contested (the
// lost grant may as well have re-granted another runner's operation), so
// only a take-over acquires it, after TakeOverWait.
func TestALostGrantAnswerIsReGrantedAndTheNewTokenUsed(t *testing.T) {
	t.Parallel()
	rec, c := firstGrantUnanswered(t)
	sess, err := deployclient.Acquire(context.Background(), deployclient.SessionConfig{Client: c, Group: operatortest.GroupName,
		Instance: operatortest.Instance, OperationID: "op-lost-answer", TTL: 5 * time.Second, Wait: 10 * time.Second,
		TakeOver: true, TakeOverWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !sess.TookOver() {
		t.Fatal("a 200 after a lost answer was acquired without a take-over")
	}
	var posts []int
	renewed := 0
	waitUntil(t, 30*time.Second, "2 renewals after the re-grant", func() bool {
		posts, renewed = nil, 0
		for _, c := range rec.all() {
			if c.method == http.MethodPost {
				posts = append(posts, c.status)
			}
			if c.method == http.MethodPut && c.status == 200 {
				renewed++
			}
		}
		return renewed >= 2 || sess.Err() != nil
	})
	if sess.Err() != nil {
		t.Fatalf("lost after a re-grant: %v", sess.Err())
	}
	// The dropped grant, its re-grant (200: same operation, new token), the hold.
	if len(posts) != 3 || posts[0] != -1 || posts[1] != http.StatusOK || posts[2] != http.StatusCreated {
		t.Fatalf("POST answers %v, want [dropped 200 201]", posts)
	}
	if renewed < 2 {
		t.Fatalf("%d renewals succeeded with the swapped token", renewed)
	}
	if err := sess.Release(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}

// No waiting: the unanswered grant is the only attempt. The server did
// grant it, so the client re-grants the operation to learn its token. That
// re-grant answers 200, which cannot be told from a re-grant of another
// runner's live operation (the lost grant may have been one): the mutex is
// renewed to 120 s and left to lapse, never released.
func TestAnAcquisitionThatGivesUpAfterALostAnswerLeavesTheMutexToLapse(t *testing.T) {
	t.Parallel()
	rec, c := firstGrantUnanswered(t)
	_, err := deployclient.Acquire(context.Background(), deployclient.SessionConfig{Client: c, Group: operatortest.GroupName,
		Instance: operatortest.Instance, OperationID: "op-gave-up", TTL: 30 * time.Second})
	var acq *deployclient.AcquireError
	if !errors.As(err, &acq) {
		t.Fatalf("Acquire = %v, want an AcquireError", err)
	}
	g, err := c.Observe(context.Background(), operatortest.GroupName)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Leases) != 1 || g.Leases[0].Kind != deployclient.KindMigration || g.Leases[0].OperationID != "op-gave-up" {
		t.Fatalf("leases %+v, want the migration mutex alone, left to lapse", g.Leases)
	}
	var got []string
	for _, c := range rec.all() {
		if c.method != http.MethodGet {
			got = append(got, fmt.Sprintf("%s %d", c.method, c.status))
		}
	}
	if strings.Join(got, ", ") != "POST -1, POST 200, PUT 200" {
		t.Fatalf("requests %v, want the unanswered grant, a re-grant for its token and its renewal to 120 s (no release)", got)
	}
}
