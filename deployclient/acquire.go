package deployclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"time"
)

// Acquire takes the migration lease, then the failover-hold, and starts
// heartbeating and watching both. ctx bounds the acquisition only: the
// session lives until Release or the loss of a lease. On failure nothing is
// left held (a granted migration lease is released), except a lease
// re-granted from another runner, which is left to lapse (see
// OperationLiveError).
//
// One runner at a time: an operation that is live under another runner
// (the observation lists it), or that may be (a grant answered 200, a
// re-grant), is not acquired unless SessionConfig.TakeOver is set; then
// Acquire renews the lease and waits TakeOverWait on the session's clock,
// from the re-grant's answer, before it takes the hold and returns. Every
// 200 counts, also one that answers a retry after an unanswered attempt:
// that attempt may have created the lease (then the 200 re-grants the
// session's own), or it may itself have re-granted another runner's live
// operation, and the answers are the same (see grant). Only a 201 proves
// that nothing was live.
func Acquire(ctx context.Context, cfg SessionConfig) (*Session, error) {
	if cfg.Client == nil || cfg.Group == "" || cfg.Instance == "" || cfg.OperationID == "" {
		return nil, errors.New("deployclient: a session needs a client, a group, an instance and an operation id")
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Clock == nil {
		cfg.Clock = RealClock{}
	}
	if cfg.TakeOverWait <= 0 {
		cfg.TakeOverWait = MaxTTL
	}
	s := &Session{cfg: cfg, clk: cfg.Clock, lostCh: make(chan struct{}),
		mig: &lease{kind: KindMigration}, hold: &lease{kind: KindFailoverHold}, ns: cfg.Client.Namespace()}
	s.api.Store(cfg.Client)
	s.ctx, s.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	limit := s.clk.Now().Add(cfg.Wait)

	// contested: the operation was, or may have been, live under another
	// runner. Its mutex is then never released by a failed acquisition
	// (that would let a third operation start beside the other runner's
	// command): it is renewed to MaxTTL and left to lapse.
	contested := false
	cleanup := func(err error) (*Session, error) {
		// Nothing may be left held: release what was granted, and what an
		// unanswered grant may have granted; end the session.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		s.forget(rctx, s.hold)
		if contested {
			s.lapse(rctx, s.mig)
		} else {
			s.forget(rctx, s.mig)
		}
		s.cancel(err)
		return nil, err
	}

	// Is the operation live under another runner? Asking first leaves that
	// runner alone. A failed observation decides nothing: the grant's 200
	// says the same, later. Its namespace is pinned (unless one was given):
	// an observation for another namespace than the given one ends the
	// attempt before anything is granted.
	seenLive := false
	obs, err := s.client().Observe(ctx, cfg.Group)
	if err == nil {
		err = s.pin("GET group "+cfg.Group, obs.Namespace)
	}
	var ne *NamespaceError
	if errors.As(err, &ne) {
		s.cancel(errNotAcquired)
		return nil, &AcquireError{Kind: KindMigration, Err: err}
	}
	if err == nil {
		if l := liveMigration(obs, cfg.OperationID); l != nil {
			if !cfg.TakeOver {
				s.cancel(errNotAcquired)
				return nil, &AcquireError{Kind: KindMigration, Err: &OperationLiveError{OperationID: l.OperationID, Instance: l.Instance, ExpiresAt: l.ExpiresAt}}
			}
			seenLive, contested = true, true
			s.progress("operation %s is live under another runner (instance %s, until %s): taking it over", l.OperationID, l.Instance, l.ExpiresAt)
		}
	}

	g, afterLost, answered, err := s.grant(ctx, s.mig, limit)
	if err != nil {
		return cleanup(err)
	}
	s.generation = g.TopologyGeneration
	// Every 200 is contested: on the first attempt it is another runner's
	// operation; after an unanswered attempt it may be the session's own
	// lost grant or another runner's operation that the lost attempt
	// re-granted, which no answer tells apart. Only a 201 (nothing was
	// live) is the session's alone.
	regranted := !g.Created
	contested = contested || regranted
	if regranted && afterLost && !seenLive {
		s.progress("the migration lease of operation %s was re-granted (200) after an attempt whose answer was lost: "+
			"that may be this session's own lost grant or another runner's live operation, and the answers do not tell them apart; "+
			"treated as another runner's", cfg.OperationID)
	}
	if regranted && !cfg.TakeOver {
		return nil, s.leaveToLapse(ctx, g, afterLost && !seenLive)
	}
	if regranted && g.Phase == PhaseDDL {
		// The other runner's command started its schema change and did not
		// confirm its end: a second runner never resumes uncertain DDL.
		return cleanup(&AcquireError{Kind: KindMigration, Err: &UncertainDDLError{OperationID: g.OperationID, Instance: g.Instance, Generation: g.TopologyGeneration}})
	}
	s.startLease(s.mig)
	if regranted {
		s.tookOver = true
		if err := s.waitTakeOver(ctx, answered); err != nil {
			return cleanup(err)
		}
	}

	// The hold is asked for under the session too: a lost migration ends
	// the attempt.
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	// The hold is asked for once the migration is the session's: a 200
	// here re-grants the hold of the operation it holds.
	h, _, _, err := s.grant(hctx, s.hold, limit)
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
	s.startLease(s.hold)
	return s, nil
}

var errNotAcquired = errors.New("deployclient: not acquired")

// liveMigration is the observation's live migration lease of operation op.
func liveMigration(g *Group, op string) *Listed {
	for i := range g.Leases {
		if l := &g.Leases[i]; l.Kind == KindMigration && l.OperationID == op {
			return l
		}
	}
	return nil
}

// leaveToLapse handles a re-grant found without TakeOver: the other
// runner's token no longer works, but its command may still run until its
// own deadline, at most MaxTTL after its last renewal. Releasing the mutex
// would let another operation start beside that command; so the lease is
// renewed to MaxTTL once and left to lapse. afterLost: the re-grant
// answered a retry after an unanswered attempt (it may have been the
// session's own grant).
func (s *Session) leaveToLapse(ctx context.Context, g *Grant, afterLost bool) error {
	s.lapse(ctx, s.mig)
	s.cancel(errNotAcquired)
	return &AcquireError{Kind: KindMigration, Err: &OperationLiveError{OperationID: g.OperationID, Instance: g.Instance, ExpiresAt: g.ExpiresAt,
		ReGranted: true, AfterLostAnswer: afterLost}}
}

// lapse stops l's heartbeat and renews it once to MaxTTL, never releasing
// it: a contested operation's mutex outlives the other runner's deadline
// and then lapses. Best effort: a failed renewal leaves the lease to lapse
// at its current ttl.
func (s *Session) lapse(ctx context.Context, l *lease) {
	s.stopHeartbeat(l)
	l.op.Lock()
	defer l.op.Unlock()
	token, _, _, _ := l.snapshot()
	l.mu.Lock()
	l.released = true // Release must not DELETE it either
	l.mu.Unlock()
	if token == "" {
		return
	}
	r, err := s.client().Renew(ctx, s.cfg.Group, l.kind, s.cfg.OperationID, token, int64(MaxTTL/time.Second), "")
	if err == nil {
		err = s.pin("PUT "+l.kind+" lease", r.Namespace)
	}
	if err != nil {
		s.progress("renewing the %s lease to %s failed (%v): it lapses at its ttl", l.kind, MaxTTL, err)
		return
	}
	s.progress("the %s lease of operation %s is left to lapse in %s (never released: the other runner's command may still run until then)", l.kind, s.cfg.OperationID, MaxTTL)
}

// waitTakeOver waits TakeOverWait from the re-grant's answer while the
// migration lease is renewed and watched: by then the previous runner is
// past its deadline, whatever its ttl was.
func (s *Session) waitTakeOver(ctx context.Context, answered time.Time) error {
	until := answered.Add(s.cfg.TakeOverWait)
	s.progress("took over operation %s from another runner: waiting until its deadline has certainly passed (%s, until %s on this clock) before starting",
		s.cfg.OperationID, s.cfg.TakeOverWait, until.UTC().Format(time.RFC3339))
	if !sleep(s.clk, until.Sub(s.clk.Now()), ctx.Done(), s.ctx.Done()) {
		if e := s.Err(); e != nil {
			return &AcquireError{Kind: KindMigration, Err: e}
		}
		return &AcquireError{Kind: KindMigration, Err: ctx.Err()}
	}
	return nil
}

// forget releases l if it was granted; if its last grant went unanswered
// (the server may have granted it), it re-grants the operation to learn a
// token and releases that. A lease left behind would block every other
// operation until its ttl. Best effort: errors are not reported.
//
// That re-grant follows an unanswered attempt, so its 200 is contested like
// Acquire's (the lost attempt may have re-granted another runner's live
// operation): a migration lease it answers 200 is left to lapse (renewed to
// MaxTTL, never released); only a 201 (nothing was live) is released. The
// migration is asked for with MaxTTL for that reason: a contested lease
// must outlive the other runner's deadline even if no renewal follows.
func (s *Session) forget(ctx context.Context, l *lease) {
	l.mu.Lock()
	ambiguous, token := l.ambiguous, l.token
	l.mu.Unlock()
	if token == "" && ambiguous {
		ttl := int64(5)
		if l.kind == KindMigration {
			ttl = int64(MaxTTL / time.Second)
		}
		sent := s.clk.Now()
		if g, err := s.client().Grant(ctx, s.cfg.Group, GrantRequest{Kind: l.kind, OperationID: s.cfg.OperationID, Instance: s.cfg.Instance, TTLSeconds: ttl}); err == nil && s.pin("POST "+l.kind+" lease", g.Namespace) == nil {
			l.confirm(g.Token, sent, time.Duration(g.TTLSeconds)*time.Second)
			if !g.Created && l.kind == KindMigration {
				s.progress("the migration lease of operation %s was re-granted (200) after an attempt whose answer was lost: it may be another runner's live operation, so it is not released", s.cfg.OperationID)
				s.lapse(ctx, l)
				return
			}
		}
	}
	_ = s.release(ctx, l)
}

// ambiguousAnswer reports a grant attempt whose effect is unknown: no
// answer at all, or a server failure (5xx other than not_leader, which is
// decided before anything is written). The server may have granted it.
// A request that failed before it was written (no connection, a refused
// dial, a failed or untrusted TLS handshake) granted nothing.
func ambiguousAnswer(err error) bool {
	if err == nil {
		return false
	}
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status >= 500 && ae.Code != CodeNotLeader
	}
	var ne *NamespaceError
	if errors.As(err, &ne) {
		return false // answered, for another namespace: nothing to re-grant in the pinned one
	}
	var op *net.OpError
	var rh tls.RecordHeaderError
	if errors.As(err, &op) && op.Op == "dial" || errors.As(err, &rh) || untrusted(err) {
		return false
	}
	return true
}

// grant asks for l until it is granted, a terminal answer comes, or limit
// passes. A retry after an ambiguous failure (the answer was lost) re-grants
// the operation: the new token replaces the old under l.op. A revoked
// operation is never granted again: 409 revoked ends the attempt.
// afterLost is set when an earlier attempt of this session went unanswered
// (it may have been written); answered is when the granting answer arrived.
//
// g.Created false (200, a re-grant) is never explained by afterLost. The
// lost attempt may have created the lease (201 lost, then 200 re-grants the
// session's own) or re-granted another runner's live lease of the same
// operation (200 lost, then 200 again), and the operator answers both
// alike: a re-grant needs the same operation id, instance and
// ServiceAccount, so the answer's instance is always the request's, and
// it names no previous holder or tenure. The caller treats every 200 as
// contested.
func (s *Session) grant(ctx context.Context, l *lease, limit time.Time) (g *Grant, afterLost bool, answered time.Time, err error) {
	l.op.Lock()
	defer l.op.Unlock()
	ttlSeconds := int64(s.cfg.TTL / time.Second)
	for attempt := 1; ; attempt++ {
		sent := s.clk.Now()
		g, err := s.client().Grant(ctx, s.cfg.Group, GrantRequest{Kind: l.kind, OperationID: s.cfg.OperationID, Instance: s.cfg.Instance, TTLSeconds: ttlSeconds})
		if err == nil {
			// A grant for another namespace than the pinned one is not
			// used, not even to release it (the session sends nothing to
			// a namespace it did not pin): it lapses at its ttl.
			if perr := s.pin("POST "+l.kind+" lease", g.Namespace); perr != nil {
				g, err = nil, perr
			}
		}
		l.mu.Lock()
		l.ambiguous = ambiguousAnswer(err)
		afterLost := l.everAmbiguous
		l.everAmbiguous = l.everAmbiguous || l.ambiguous
		l.mu.Unlock()
		if err == nil {
			answered := s.clk.Now()
			l.confirm(g.Token, sent, time.Duration(g.TTLSeconds)*time.Second)
			return g, afterLost, answered, nil
		}
		var wait time.Duration
		var ae *APIError
		switch {
		case ctx.Err() != nil:
			return nil, false, time.Time{}, &AcquireError{Kind: l.kind, Err: ctx.Err()}
		case errors.As(err, &ae) && ae.Code == CodeHeld && l.kind == KindMigration:
			wait = s.politeWait(ae.Holder)
			h := ae.Holder
			if h == nil {
				h = &Holder{OperationID: "?", Instance: "?", ExpiresAt: "?"}
			}
			if s.clk.Now().Add(wait).After(limit) {
				return nil, false, time.Time{}, &AcquireError{Kind: l.kind, WaitedOut: s.cfg.Wait > 0, Err: err}
			}
			s.progress("the migration mutex of group %s is held by operation %s (instance %s) until %s; waiting %s (giving up at %s)",
				s.cfg.Group, h.OperationID, h.Instance, h.ExpiresAt, wait.Round(100*time.Millisecond), limit.UTC().Format(time.RFC3339))
		case Transient(err):
			wait = backoff(attempt, ae)
			if ae != nil && ae.Code == CodeNotLeader {
				wait = notLeaderRetry + jitter(notLeaderRetry)
			}
			if s.clk.Now().Add(wait).After(limit) {
				return nil, false, time.Time{}, &AcquireError{Kind: l.kind, WaitedOut: s.cfg.Wait > 0, Err: err}
			}
			s.progress("%s lease of group %s: %v; retrying in %s", l.kind, s.cfg.Group, err, wait.Round(100*time.Millisecond))
		default:
			return nil, false, time.Time{}, &AcquireError{Kind: l.kind, Err: err}
		}
		if !sleep(s.clk, wait, ctx.Done(), s.ctx.Done()) {
			if e := s.Err(); e != nil {
				return nil, false, time.Time{}, &AcquireError{Kind: l.kind, Err: e}
			}
			return nil, false, time.Time{}, &AcquireError{Kind: l.kind, Err: ctx.Err()}
		}
	}
}

// notLeaderRetry is the pause after 503 not_leader: the connection was
// dropped, so the retry dials again and may reach the leader at once.
const notLeaderRetry = 100 * time.Millisecond

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
