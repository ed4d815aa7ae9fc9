package deployclient

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// startLease starts l's heartbeat and, unless turned off, its watch; both
// end with the session or stopLease.
func (s *Session) startLease(l *lease) {
	ctx, stop := context.WithCancel(s.ctx)
	l.stop, l.done = stop, make(chan struct{})
	hb, w := make(chan struct{}), make(chan struct{})
	go func() { defer close(hb); s.heartbeat(ctx, l) }()
	go func() {
		defer close(w)
		if !s.cfg.NoWatch {
			s.watch(ctx, l)
		}
	}()
	go func() { <-hb; <-w; close(l.done) }()
}

// heartbeat renews l every ttl/3 from the moment its last confirmed request
// was sent. A transient refusal (423, 503, a transport error, 401) is retried
// until the confirmed deadline and never moves it; when the deadline passes
// without a confirmation, or a terminal answer comes, the lease is lost.
func (s *Session) heartbeat(ctx context.Context, l *lease) {
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
		if !sleep(s.clk, wake.Sub(s.clk.Now()), ctx.Done(), nil) {
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
		c, r := s.renewNow(ctx, l, "")
		if ctx.Err() != nil {
			return // released or lost meanwhile
		}
		switch c.verdict {
		case confirmed:
			next, last = r.sent.Add(c.ttl/3), nil
		case terminal:
			return
		default:
			last = r.err
			next = s.clk.Now().Add(retryPause(r.err, ttl))
		}
	}
}

// retryPause is the pause before the next renewal after a transient
// refusal: the server's Retry-After, else 1 s; at least 250 ms, at most a
// renewal interval. After not_leader it is short: the connection was
// dropped, and the retry may reach the leader at once.
func retryPause(err error, ttl time.Duration) time.Duration {
	var ae *APIError
	errors.As(err, &ae)
	retry := time.Second
	switch {
	case ae != nil && ae.Code == CodeNotLeader:
		retry = notLeaderRetry + jitter(notLeaderRetry)
	case ae != nil && ae.RetryAfter > 0:
		retry = ae.RetryAfter
	}
	return min(max(retry, notLeaderRetry), ttl/3)
}

// minRenewAttempt is the least time a renewal attempt is given (unless less
// is left before the loss moment).
const minRenewAttempt = time.Second

// renewAttempt is how long one renewal attempt may take when budget is
// left before the loss moment: half of it (at least minRenewAttempt), so
// that an attempt lost in the network leaves time for another on a new
// connection. A replica that goes away (a rolling restart, a deleted
// leader Pod) can leave a request without any answer: a connection to an
// address that no longer exists, which the Service still routed to a
// moment ago. Given the whole budget, that one attempt would lose the
// lease.
func renewAttempt(budget time.Duration) time.Duration {
	return max(budget/2, min(budget, minRenewAttempt))
}

// renewNow sends one renewal of l, serialized with its other requests, cut
// off at half the time left before its loss moment (renewAttempt), and applies the answer: a confirmation moves the
// deadline, a terminal answer loses the session. phase, on the migration
// lease, is sent (empty: the phase the session wants). An operator that
// answers 400 to a phase is older than phases: the renewal is sent again
// without one, and no later renewal carries one.
func (s *Session) renewNow(ctx context.Context, l *lease, phase Phase) (classification, renewal) {
	l.op.Lock()
	defer l.op.Unlock()
	token, _, _, deadline := l.snapshot()
	lossAt := s.lossAt(l)
	j := judged{lossAt: lossAt, deadline: deadline, generation: s.generation}
	r := renewal{kind: l.kind, sent: s.clk.Now()}
	if !r.sent.Before(lossAt) {
		r.answered, r.err = r.sent, errors.New("the deadline passed before the renewal was sent")
		c := classify(r, j)
		s.lose(c.lost)
		return c, r
	}
	// An explicit phase (MarkDDL, Confirm) is always sent, even after an
	// operator once refused one (a rolling upgrade may have moved the
	// leader to a newer replica); the heartbeat's phase is not, once
	// refused.
	if l.kind == KindMigration && phase == "" && !s.noPhases.Load() {
		phase = s.wantPhase()
	}
	if l.kind != KindMigration {
		phase = ""
	}
	rctx, cancel := context.WithTimeout(ctx, renewAttempt(lossAt.Sub(r.sent)))
	defer cancel()
	ttlSeconds := int64(s.cfg.TTL / time.Second)
	r.lease, r.err = s.client().Renew(rctx, s.cfg.Group, l.kind, s.cfg.OperationID, token, ttlSeconds, phase)
	if phase != "" && isBadRequest(r.err) {
		s.noPhases.Store(true)
		s.progress("the operator does not record a migration's phase (it answered %v to phase %q): it is older than this client; the DDL boundary is kept on this side only, and renewals carry no phase", r.err, phase)
		r.sent = s.clk.Now()
		r.lease, r.err = s.client().Renew(rctx, s.cfg.Group, l.kind, s.cfg.OperationID, token, ttlSeconds, "")
		phase = "" // what was sent last
	}
	if r.err == nil {
		// An answer for another namespace confirms nothing: it is a loss.
		if err := s.pin("PUT "+l.kind+" lease", r.lease.Namespace); err != nil {
			r.lease, r.err = nil, err
		}
	}
	if phase != "" && r.err == nil {
		s.noPhases.Store(false) // this operator records phases
	}
	r.phase = phase
	r.answered = s.clk.Now()
	if ctx.Err() != nil && r.err != nil {
		return classification{verdict: transient}, r // stopped meanwhile: decides nothing
	}
	c := classify(r, j)
	switch c.verdict {
	case confirmed:
		l.confirm("", r.sent, c.ttl)
	case terminal:
		s.lose(c.lost)
	}
	return c, r
}

func isBadRequest(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusBadRequest
}

// ErrPhaseNotRecorded is returned (wrapped) by MarkDDL when the operator
// confirmed authority but does not record phases (it is older).
var ErrPhaseNotRecorded = errors.New("the operator does not record the phase (it is older than this client); authority was confirmed by a plain renewal")

// MarkDDL reports the DDL boundary: it returns nil only once the operator
// has answered 200, at the grant's generation, to a renewal of the
// migration lease carrying phase ddl. Against an operator that does not
// record phases it returns ErrPhaseNotRecorded after a plain renewal was
// confirmed. Any other answer is an error (and a terminal one loses the
// session).
func (s *Session) MarkDDL(ctx context.Context) error {
	s.advance(PhaseDDL)
	return s.confirmPhase(ctx, PhaseDDL)
}

// Confirm confirms authority after the work ended: one renewal of the
// migration lease, sent now, answered 200 at the grant's generation before
// the lease's loss moment. With succeeded it carries phase done (the
// operation's outcome was confirmed). A run may call itself successful
// only when Confirm returned nil: a lease lost during the work, however
// late the session learned of it, makes Confirm fail.
func (s *Session) Confirm(ctx context.Context, succeeded bool) error {
	var phase Phase
	if succeeded {
		s.advance(PhaseDone)
		phase = PhaseDone
	}
	if err := s.confirmPhase(ctx, phase); err != nil && !errors.Is(err, ErrPhaseNotRecorded) {
		return err
	}
	return nil
}

// confirmPhase renews the migration lease until one renewal is confirmed
// (nil), the lease is lost, or ctx ends.
func (s *Session) confirmPhase(ctx context.Context, phase Phase) error {
	for attempt := 1; ; attempt++ {
		if err := s.Err(); err != nil {
			return err
		}
		c, r := s.renewNow(ctx, s.mig, phase)
		switch c.verdict {
		case confirmed:
			if phase != "" && r.phase == "" {
				return ErrPhaseNotRecorded // a plain renewal after a 400 to the phase
			}
			if phase != "" && r.lease.Phase != "" && r.lease.Phase.Before(phase) {
				return errors.New("the operator answered the renewal without recording phase " + string(phase))
			}
			return nil
		case terminal:
			return c.lost
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		_, ttl, _, _ := s.mig.snapshot()
		if !sleep(s.clk, retryPause(r.err, ttl), ctx.Done(), s.ctx.Done()) {
			if err := s.Err(); err != nil {
				return err
			}
			return ctx.Err()
		}
	}
}
