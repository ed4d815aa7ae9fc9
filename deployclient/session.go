package deployclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// DefaultTTL is the ttl a session asks for when none is given.
const DefaultTTL = 30 * time.Second

// SessionConfig describes one operation: the group, the database (instance)
// and the operation id it holds the mutex for.
type SessionConfig struct {
	Client      *Client
	Group       string
	Instance    string
	OperationID string
	// TTL is asked for both leases; the server clamps it to [5 s, 120 s] and
	// the session uses the ttl the server answers. Default 30 s.
	TTL time.Duration
	// Wait bounds how long Acquire keeps trying while the mutex is held by
	// another operation or the API answers transient refusals (423, 503, a
	// transport error). Zero means one attempt per lease.
	Wait time.Duration
	// Clock is the one clock of the session. Its Now must carry a monotonic
	// reading (the real clock's does), so that deadlines are measured on the
	// client's monotonic clock. Default clock.RealClock.
	Clock clock.WithTicker
	// Progress receives lines a person can act on (waiting for a holder,
	// retrying a refusal). Optional.
	Progress func(msg string)
	// Margin declares a lease lost this long before its confirmed deadline
	// rather than at it, so that the work can be stopped by the deadline
	// (the CLI sets it to its SIGTERM-to-SIGKILL grace). It is capped at a
	// third of the granted ttl, the renewal interval. Default 0.
	Margin time.Duration
}

// Cause says why a lease was lost.
type Cause string

// Causes of a lost lease.
const (
	// CauseRevoked: 409 revoked; Reason is topology_changed or operator_revoked.
	CauseRevoked Cause = "revoked"
	// CauseExpired: 404 not_found; the operator saw the lease expire, or no
	// longer knows it.
	CauseExpired Cause = "expired"
	// CauseTokenMismatch: 403 token_mismatch; the operation was re-granted
	// with another token.
	CauseTokenMismatch Cause = "token_mismatch"
	// CauseForbidden: 403 forbidden or migration_not_held; the caller may no
	// longer hold this lease.
	CauseForbidden Cause = "forbidden"
	// CauseGenerationChanged: a renewal answered a topology generation other
	// than the grant's.
	CauseGenerationChanged Cause = "generation_changed"
	// CauseDeadlinePassed: no renewal was confirmed before the last confirmed
	// deadline (423 answers, an unreachable or failing server).
	CauseDeadlinePassed Cause = "deadline_passed"
	// CauseRejected: the server rejected the renewal in a way the client
	// cannot fix (400 and other answers outside the renewal's contract).
	CauseRejected Cause = "rejected"
)

// LostError is why a session lost its authority. It is reported once.
type LostError struct {
	// Kind is the lease that was lost first.
	Kind  string
	Cause Cause
	// Reason is the wire reason of a revocation.
	Reason string
	// Generation is the group's generation when the answer told it (409
	// revoked, or a renewal at another generation).
	Generation      int64
	GrantGeneration int64
	// Deadline is the last confirmed deadline of the lease, on the client's
	// clock. A loss for lack of confirmation is declared Margin before it.
	Deadline time.Time
	// Err is the last answer or transport error, if any.
	Err error
}

func (e *LostError) Error() string {
	switch e.Cause {
	case CauseRevoked:
		return fmt.Sprintf("the %s lease was revoked (%s): the group's topology generation is %d, the grant was under %d", e.Kind, e.Reason, e.Generation, e.GrantGeneration)
	case CauseExpired:
		return fmt.Sprintf("the %s lease is gone (404 not_found): the operator saw it expire or no longer knows it", e.Kind)
	case CauseTokenMismatch:
		return fmt.Sprintf("the operator refused the %s lease's token (403 token_mismatch): this operation was re-granted by someone else", e.Kind)
	case CauseForbidden:
		return fmt.Sprintf("the %s lease may no longer be held by this caller (%v)", e.Kind, e.Err)
	case CauseGenerationChanged:
		return fmt.Sprintf("the topology generation moved from %d to %d under the %s lease: the primary moved", e.GrantGeneration, e.Generation, e.Kind)
	case CauseDeadlinePassed:
		if e.Err != nil {
			return fmt.Sprintf("the %s lease was not confirmed before its deadline (last answer: %v)", e.Kind, e.Err)
		}
		return fmt.Sprintf("the %s lease was not confirmed before its deadline", e.Kind)
	default:
		return fmt.Sprintf("the %s lease was rejected: %v", e.Kind, e.Err)
	}
}

func (e *LostError) Unwrap() error { return e.Err }

// ErrReleased is the cause of a session's context after Release.
var ErrReleased = errors.New("deployclient: the session was released")

// ErrNotRecorded is in Release's error when the outcome step failed and the
// migration mutex was therefore left to lapse.
var ErrNotRecorded = errors.New("the outcome was not recorded, so the migration mutex is not released (it lapses at its ttl)")

// AcquireError is a failure to take the leases.
type AcquireError struct {
	Kind string
	// WaitedOut is set when Wait ran out while the mutex stayed held or the
	// API kept refusing.
	WaitedOut bool
	Err       error
}

func (e *AcquireError) Error() string {
	if e.WaitedOut {
		return fmt.Sprintf("could not acquire the %s lease in time: %v", e.Kind, e.Err)
	}
	return fmt.Sprintf("could not acquire the %s lease: %v", e.Kind, e.Err)
}

func (e *AcquireError) Unwrap() error { return e.Err }

// Session holds a group's migration mutex and the operation's failover-hold,
// heartbeats both, and reports their loss once.
type Session struct {
	cfg        SessionConfig
	clk        clock.WithTicker
	generation int64
	mig, hold  *lease

	ctx      context.Context
	cancel   context.CancelCauseFunc
	lostCh   chan struct{}
	lostOnce sync.Once
	lost     atomic.Pointer[LostError]
}

// lease is one of the session's two leases.
type lease struct {
	kind string
	// op serializes this lease's grants, renewals and release: a re-grant
	// and a renewal never interleave, and the token they use is the one the
	// last answer gave.
	op sync.Mutex

	mu       sync.Mutex // guards the fields below
	token    string
	ttl      time.Duration
	sent     time.Time // when the last confirmed request was sent
	deadline time.Time
	released bool
	// ambiguous: the last grant attempt got no answer; the server may have
	// granted the lease.
	ambiguous bool

	stop context.CancelFunc
	done chan struct{}
}

func (l *lease) snapshot() (token string, ttl time.Duration, sent, deadline time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.token, l.ttl, l.sent, l.deadline
}

// confirm records an answer to a request sent at sent: the deadline is
// sent + ttl on the client's clock, never the server's expiresAt.
func (l *lease) confirm(token string, sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if token != "" {
		l.token = token
	}
	// Requests of one lease are serialized, so sent only moves forward; and
	// the server's expiry is now sent + the answered ttl, even if that ttl
	// is shorter than the last one.
	l.ttl, l.sent, l.deadline = ttl, sent, sent.Add(ttl)
}

// lossAt is when the lease counts as lost without a new confirmation: the
// deadline, less the session's margin (at most ttl/3).
func (s *Session) lossAt(l *lease) time.Time {
	_, ttl, _, deadline := l.snapshot()
	return deadline.Add(-min(s.cfg.Margin, ttl/3))
}

// Acquire takes the migration lease, then the failover-hold, and starts
// heartbeating both. ctx bounds the acquisition only: the session lives
// until Release or the loss of a lease. On failure nothing is left held
// (a granted migration lease is released).
func Acquire(ctx context.Context, cfg SessionConfig) (*Session, error) {
	if cfg.Client == nil || cfg.Group == "" || cfg.Instance == "" || cfg.OperationID == "" {
		return nil, errors.New("deployclient: a session needs a client, a group, an instance and an operation id")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	s := &Session{cfg: cfg, clk: cfg.Clock, lostCh: make(chan struct{}),
		mig: &lease{kind: KindMigration}, hold: &lease{kind: KindFailoverHold}}
	s.ctx, s.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	limit := s.clk.Now().Add(cfg.Wait)

	cleanup := func(err error) (*Session, error) {
		// Nothing may be left held: release what was granted, and what an
		// unanswered grant may have granted; end the session.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		s.forget(rctx, s.hold)
		s.forget(rctx, s.mig)
		s.cancel(err)
		return nil, err
	}
	g, err := s.grant(ctx, s.mig, limit)
	if err != nil {
		return cleanup(err)
	}
	s.generation = g.TopologyGeneration
	s.startHeartbeat(s.mig)

	// The hold is asked for under the session too: a lost migration ends
	// the attempt.
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	h, err := s.grant(hctx, s.hold, limit)
	switch {
	case err != nil && s.Err() != nil:
		err = &AcquireError{Kind: KindFailoverHold, Err: s.Err()}
	case err == nil && h.TopologyGeneration != s.generation:
		err = &AcquireError{Kind: KindFailoverHold, Err: fmt.Errorf("the hold was granted under topology generation %d, the migration under %d: the primary moved", h.TopologyGeneration, s.generation)}
	case err == nil && !s.Held():
		// The migration was lost, or came too close to its deadline, while
		// the hold was asked for: the session would start already lost.
		lost := s.Err()
		if lost == nil {
			lost = fmt.Errorf("the migration lease was not confirmed in time while the hold was asked for")
		}
		err = &AcquireError{Kind: KindFailoverHold, Err: lost}
	}
	if err != nil {
		return cleanup(err)
	}
	s.startHeartbeat(s.hold)
	return s, nil
}

// Held reports whether both leases are held now: neither was lost, and
// neither is past its confirmed deadline (less the margin). Check it when
// the work ends: a loss at that very moment may not have been reported yet.
func (s *Session) Held() bool {
	if s.Err() != nil {
		return false
	}
	now := s.clk.Now()
	for _, l := range []*lease{s.mig, s.hold} {
		if token, _, _, _ := l.snapshot(); token == "" || !now.Before(s.lossAt(l)) {
			return false
		}
	}
	return true
}

// forget releases l if it was granted; if its last grant went unanswered
// (the server may have granted it), it re-grants the operation to learn a
// token and releases that. A lease left behind would block every other
// operation until its ttl. Best effort: errors are not reported.
func (s *Session) forget(ctx context.Context, l *lease) {
	l.mu.Lock()
	ambiguous, token := l.ambiguous, l.token
	l.mu.Unlock()
	if token == "" && ambiguous {
		if g, err := s.cfg.Client.Grant(ctx, s.cfg.Group, GrantRequest{Kind: l.kind, OperationID: s.cfg.OperationID, Instance: s.cfg.Instance, TTLSeconds: 5}); err == nil {
			l.confirm(g.Token, s.clk.Now(), time.Duration(g.TTLSeconds)*time.Second)
		}
	}
	_ = s.release(ctx, l)
}

// Generation is the topology generation both leases were granted under.
func (s *Session) Generation() int64 { return s.generation }

// TTL is the ttl the server granted the migration lease.
func (s *Session) TTL() time.Duration {
	_, ttl, _, _ := s.mig.snapshot()
	return ttl
}

// Deadline is the lease's last confirmed deadline on the client's clock: the
// moment its last confirmed request was sent, plus its ttl.
func (s *Session) Deadline(kind string) time.Time {
	l := s.mig
	if kind == KindFailoverHold {
		l = s.hold
	}
	_, _, _, d := l.snapshot()
	return d
}

// Lost is closed when a lease is lost. Err then says why.
func (s *Session) Lost() <-chan struct{} { return s.lostCh }

// Err is nil while both leases are held (or were released), and the
// *LostError once one was lost.
func (s *Session) Err() error {
	if e := s.lost.Load(); e != nil {
		return e
	}
	return nil
}

// Context is canceled when the session loses a lease (its cause is the
// *LostError) or is released (ErrReleased). Work done under the leases
// should run under it.
func (s *Session) Context() context.Context { return s.ctx }

func (s *Session) lose(e *LostError) {
	s.lostOnce.Do(func() {
		// Err and Context say why before Lost is closed.
		s.lost.Store(e)
		s.cancel(e)
		close(s.lostCh)
	})
}

func (s *Session) progress(format string, args ...any) {
	if s.cfg.Progress != nil {
		s.cfg.Progress(fmt.Sprintf(format, args...))
	}
}

// grant asks for l until it is granted, a terminal answer comes, or limit
// passes. A retry after an ambiguous failure (the answer was lost) re-grants
// the operation: the new token replaces the old under l.op. A revoked
// operation is never granted again: 409 revoked ends the attempt.
func (s *Session) grant(ctx context.Context, l *lease, limit time.Time) (*Grant, error) {
	l.op.Lock()
	defer l.op.Unlock()
	ttlSeconds := int64(s.cfg.TTL / time.Second)
	for attempt := 1; ; attempt++ {
		sent := s.clk.Now()
		g, err := s.cfg.Client.Grant(ctx, s.cfg.Group, GrantRequest{Kind: l.kind, OperationID: s.cfg.OperationID, Instance: s.cfg.Instance, TTLSeconds: ttlSeconds})
		var answered *APIError
		l.mu.Lock()
		l.ambiguous = err != nil && !errors.As(err, &answered)
		l.mu.Unlock()
		if err == nil {
			l.confirm(g.Token, sent, time.Duration(g.TTLSeconds)*time.Second)
			return g, nil
		}
		var wait time.Duration
		var ae *APIError
		switch {
		case ctx.Err() != nil:
			return nil, &AcquireError{Kind: l.kind, Err: ctx.Err()}
		case errors.As(err, &ae) && ae.Code == CodeHeld && l.kind == KindMigration:
			wait = s.politeWait(ae.Holder)
			h := ae.Holder
			if h == nil {
				h = &Holder{OperationID: "?", Instance: "?", ExpiresAt: "?"}
			}
			if s.clk.Now().Add(wait).After(limit) {
				return nil, &AcquireError{Kind: l.kind, WaitedOut: s.cfg.Wait > 0, Err: err}
			}
			s.progress("the migration mutex of group %s is held by operation %s (instance %s) until %s; waiting %s (giving up at %s)",
				s.cfg.Group, h.OperationID, h.Instance, h.ExpiresAt, wait.Round(100*time.Millisecond), limit.UTC().Format(time.RFC3339))
		case Transient(err):
			wait = backoff(attempt, ae)
			if s.clk.Now().Add(wait).After(limit) {
				return nil, &AcquireError{Kind: l.kind, WaitedOut: s.cfg.Wait > 0, Err: err}
			}
			s.progress("%s lease of group %s: %v; retrying in %s", l.kind, s.cfg.Group, err, wait.Round(100*time.Millisecond))
		default:
			return nil, &AcquireError{Kind: l.kind, Err: err}
		}
		if !s.sleep(ctx, wait) {
			if e := s.Err(); e != nil {
				return nil, &AcquireError{Kind: l.kind, Err: e}
			}
			return nil, &AcquireError{Kind: l.kind, Err: ctx.Err()}
		}
	}
}

// politeWait is how long to wait for a holder: until its expiresAt (read on
// the client's clock, so only a hint), at least 0.5 s and at most 2 min,
// plus jitter so that waiting pipelines do not ask in step.
func (s *Session) politeWait(h *Holder) time.Duration {
	d := time.Second
	if h != nil {
		if t, err := time.Parse(time.RFC3339Nano, h.ExpiresAt); err == nil {
			d = t.Sub(s.clk.Now())
		}
	}
	d = min(max(d, 500*time.Millisecond), 2*time.Minute)
	return d + jitter(d/4+500*time.Millisecond)
}

// backoff is the pause after a transient refusal: the server's Retry-After
// when it gave one, else 0.5 s doubling to 8 s; with jitter.
func backoff(attempt int, ae *APIError) time.Duration {
	if ae != nil && ae.RetryAfter > 0 {
		return ae.RetryAfter + jitter(250*time.Millisecond)
	}
	d := 500 * time.Millisecond << min(attempt-1, 4)
	return d + jitter(d/4)
}

func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

// sleep waits d on the session's clock; false when ctx or the session ended.
func (s *Session) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil && s.ctx.Err() == nil
	}
	t := s.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-s.ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

func (s *Session) startHeartbeat(l *lease) {
	ctx, stop := context.WithCancel(s.ctx)
	l.stop, l.done = stop, make(chan struct{})
	go s.heartbeat(ctx, l)
}

// heartbeat renews l every ttl/3 from the moment its last confirmed request
// was sent. A transient refusal (423, 503, a transport error, 401) is retried
// until the confirmed deadline and never moves it; when the deadline passes
// without a confirmation, or a terminal answer comes, the lease is lost.
func (s *Session) heartbeat(ctx context.Context, l *lease) {
	defer close(l.done)
	_, ttl, sent, _ := l.snapshot()
	next := sent.Add(ttl / 3)
	var last error
	for {
		_, ttl, _, deadline := l.snapshot()
		lossAt := s.lossAt(l)
		wake := next
		if lossAt.Before(wake) {
			wake = lossAt
		}
		if !s.sleep(ctx, wake.Sub(s.clk.Now())) {
			return
		}
		now := s.clk.Now()
		if !now.Before(lossAt) {
			s.lose(&LostError{Kind: l.kind, Cause: CauseDeadlinePassed, GrantGeneration: s.generation, Deadline: deadline, Err: last})
			return
		}
		if now.Before(next) {
			continue
		}
		ans, err := s.renewOnce(ctx, l, now, lossAt)
		if ctx.Err() != nil {
			return // released or lost meanwhile
		}
		if !s.clk.Now().Before(lossAt) {
			// The answer came after the deadline: whatever it says, the
			// work ran unconfirmed for a moment. That is a loss.
			if err == nil {
				err = errors.New("the renewal was answered only after the deadline")
			}
			s.lose(&LostError{Kind: l.kind, Cause: CauseDeadlinePassed, GrantGeneration: s.generation, Deadline: deadline, Err: err})
			return
		}
		if err == nil {
			if ans.TopologyGeneration != s.generation {
				s.lose(&LostError{Kind: l.kind, Cause: CauseGenerationChanged, Generation: ans.TopologyGeneration, GrantGeneration: s.generation, Deadline: deadline})
				return
			}
			newTTL := time.Duration(ans.TTLSeconds) * time.Second
			l.confirm("", now, newTTL)
			next = now.Add(newTTL / 3)
			last = nil
			continue
		}
		if lost := terminal(l.kind, err); lost != nil {
			lost.GrantGeneration, lost.Deadline = s.generation, deadline
			s.lose(lost)
			return
		}
		last = err
		var ae *APIError
		errors.As(err, &ae)
		retry := time.Second
		if ae != nil && ae.RetryAfter > 0 {
			retry = ae.RetryAfter
		}
		retry = min(max(retry, 250*time.Millisecond), ttl/3)
		next = s.clk.Now().Add(retry)
	}
}

// renewOnce sends one renewal, cut off at the deadline (less the margin).
func (s *Session) renewOnce(ctx context.Context, l *lease, now, deadline time.Time) (*Lease, error) {
	l.op.Lock()
	defer l.op.Unlock()
	token, _, _, _ := l.snapshot()
	rctx, cancel := context.WithTimeout(ctx, deadline.Sub(now))
	defer cancel()
	return s.cfg.Client.Renew(rctx, s.cfg.Group, l.kind, s.cfg.OperationID, token, int64(s.cfg.TTL/time.Second))
}

// terminal maps an answer that ends the lease to its LostError; nil for a
// transient one.
func terminal(kind string, err error) *LostError {
	var ae *APIError
	if !errors.As(err, &ae) || Transient(err) {
		return nil
	}
	e := &LostError{Kind: kind, Err: err}
	switch {
	case ae.Status == http.StatusConflict && ae.Code == CodeRevoked:
		e.Cause, e.Reason, e.Generation = CauseRevoked, ae.Reason, ae.Generation
	case ae.Status == http.StatusNotFound:
		e.Cause = CauseExpired
	case ae.Code == CodeTokenMismatch:
		e.Cause = CauseTokenMismatch
	case ae.Status == http.StatusForbidden:
		e.Cause = CauseForbidden
	default:
		e.Cause = CauseRejected
	}
	return e
}

// ReleaseHold stops the failover-hold's heartbeat and releases it. Call it
// first on every failure path: a planned failover may then proceed.
func (s *Session) ReleaseHold(ctx context.Context) error { return s.release(ctx, s.hold) }

// Release ends the session in the order the contract asks: the hold first;
// then recorded, the caller's step that durably records the operation's
// outcome (success or failure) while the mutex is still held and renewed;
// then the migration mutex. When recorded fails, the mutex is not released:
// its heartbeat stops and it lapses at its ttl, so no other operation starts
// before a person has looked. A lost session is released the same way (the
// server answers 204 for revoked and expired leases).
func (s *Session) Release(ctx context.Context, recorded func(context.Context) error) error {
	var errs []error
	if err := s.ReleaseHold(ctx); err != nil {
		errs = append(errs, err)
	}
	if recorded != nil {
		if err := recorded(ctx); err != nil {
			s.stopHeartbeat(s.mig)
			s.cancel(ErrReleased)
			return errors.Join(append(errs, fmt.Errorf("%w: %w", ErrNotRecorded, err))...)
		}
	}
	if err := s.release(ctx, s.mig); err != nil {
		errs = append(errs, err)
	}
	s.cancel(ErrReleased)
	return errors.Join(errs...)
}

func (s *Session) stopHeartbeat(l *lease) {
	if l.stop != nil {
		l.stop()
		<-l.done
	}
}

// release stops l's heartbeat and DELETEs it, retrying transient failures a
// few times. A lease never granted is not released.
func (s *Session) release(ctx context.Context, l *lease) error {
	s.stopHeartbeat(l)
	l.op.Lock()
	defer l.op.Unlock()
	token, _, _, _ := l.snapshot()
	l.mu.Lock()
	done := l.released || token == ""
	l.mu.Unlock()
	if done {
		return nil
	}
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		if err = s.cfg.Client.Release(ctx, s.cfg.Group, l.kind, s.cfg.OperationID, token); err == nil || !Transient(err) {
			break
		}
		if !s.sleepCtx(ctx, backoff(attempt, nil)) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("release the %s lease: %w", l.kind, err)
	}
	l.mu.Lock()
	l.released = true
	l.mu.Unlock()
	return nil
}

// sleepCtx waits d unless ctx ends; it ignores the session's own end.
func (s *Session) sleepCtx(ctx context.Context, d time.Duration) bool {
	t := s.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
