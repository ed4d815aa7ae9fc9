package deployclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
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
	// client's monotonic clock. Default RealClock.
	Clock Clock
	// Progress receives lines a person can act on (waiting for a holder,
	// retrying a refusal). Optional.
	Progress func(msg string)
	// Margin declares a lease lost this long before its confirmed deadline
	// rather than at it, so that the work can be stopped by the deadline
	// (the CLI sets it to its SIGTERM-to-SIGKILL grace). It is capped at a
	// third of the granted ttl, the renewal interval. Default 0.
	Margin time.Duration
	// TakeOver lets the session take an operation that is live under
	// another runner (the same operation id, another process): it renews
	// the re-granted lease and waits TakeOverWait before Acquire returns,
	// so the previous runner's work is past its deadline. Without it,
	// Acquire fails with an *OperationLiveError.
	TakeOver bool
	// TakeOverWait is how long a take-over waits; default the maximum ttl,
	// 120 s (the previous holder's deadline is at most one ttl after its
	// last confirmed renewal, which came before the re-grant).
	TakeOverWait time.Duration
	// DDLStarted, when set, is asked before every renewal of the migration
	// lease: true sends phase ddl (the CLI checks its DDL marker file).
	// MarkDDL is the confirmed way to report the boundary.
	DDLStarted func() bool
	// NoWatch turns the lease GET off: the session learns of a loss at its
	// renewals only.
	NoWatch bool
}

// The group's namespace is pinned per session: Client's Config.Namespace
// when set, else the first answer that names one (the observation Acquire
// reads first, or a grant's or renewal's answer). From then on every
// request of the session names it (?namespace=), and an answer that names
// another is a *NamespaceError: a loss of authority, never a reason to
// re-pin.

// MaxTTL is the longest ttl the server grants.
const MaxTTL = 120 * time.Second

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
	// CauseNamespaceMismatch: an answer named another namespace than the
	// one the session pinned (a *NamespaceError, a protocol error). The
	// session never follows it to the other namespace.
	CauseNamespaceMismatch Cause = "namespace_mismatch"
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
	case CauseNamespaceMismatch:
		return fmt.Sprintf("the %s lease is treated as lost: %v", e.Kind, e.Err)
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

// Permanent reports a refusal that no retry of the same request can change:
// 403 forbidden, 409 revoked, 409 verification_required, an
// UncertainDDLError, and an answer for another namespace than the pinned
// one (a *NamespaceError).
func (e *AcquireError) Permanent() bool {
	var ud *UncertainDDLError
	var ne *NamespaceError
	if errors.As(e.Err, &ud) || errors.As(e.Err, &ne) {
		return true
	}
	var ae *APIError
	if !errors.As(e.Err, &ae) {
		return false
	}
	switch ae.Code {
	case CodeForbidden, CodeRevoked, CodeVerificationRequired:
		return true
	}
	return false
}

// UncertainDDLError: a take-over found the operation's record at phase ddl
// (the other runner's command started its schema change and never
// confirmed its end). A second runner never resumes uncertain DDL: a person
// must verify the schema. The lease is left to lapse.
type UncertainDDLError struct {
	OperationID, Instance string
	Generation            int64
}

func (e *UncertainDDLError) Error() string {
	return fmt.Sprintf("operation %s (instance %s) passed its DDL boundary under another runner and never confirmed its end (generation %d): a second runner never resumes uncertain DDL; a person must verify the schema, then run a new operation id", e.OperationID, e.Instance, e.Generation)
}

// OperationLiveError: the operation id is live under another runner, and
// the session was not allowed to take it over (SessionConfig.TakeOver).
type OperationLiveError struct {
	OperationID, Instance string
	// ExpiresAt is the live lease's expiry as the operator reported it.
	ExpiresAt string
	// ReGranted: this attempt's own grant found it (200, a re-grant), so the
	// other runner's token no longer works. The re-granted lease is renewed
	// to the maximum ttl and left to lapse, never released: no other
	// operation can take the mutex while the other runner may still run.
	ReGranted bool
	// AfterLostAnswer: the 200 answered a retry after an attempt whose
	// answer was lost. It may have re-granted this attempt's own lost grant
	// rather than another runner's operation; nothing in the answer tells
	// which, so it is handled as another runner's.
	AfterLostAnswer bool
}

func (e *OperationLiveError) Error() string {
	if e.ReGranted && e.AfterLostAnswer {
		return fmt.Sprintf("operation %s (instance %s) was re-granted (200) after a request of this attempt got no answer: "+
			"either that request granted it to this attempt, or it re-granted another runner's live operation, and the answer cannot tell which; "+
			"treated as another runner's, the mutex is left to lapse in %s so that nothing overlaps a command that may still run; "+
			"retry once it lapsed, use a new operation id, or --take-over", e.OperationID, e.Instance, MaxTTL)
	}
	if e.ReGranted {
		return fmt.Sprintf("operation %s (instance %s) was live under another runner: this attempt's grant re-granted it, and the mutex is left to lapse in %s so that nothing overlaps the other runner's command; use a new operation id, or --take-over", e.OperationID, e.Instance, MaxTTL)
	}
	return fmt.Sprintf("operation %s (instance %s) is live under another runner until %s: not starting a second one; use a new operation id, wait for it, or --take-over", e.OperationID, e.Instance, e.ExpiresAt)
}

func (e *AcquireError) Error() string {
	if e.WaitedOut {
		return fmt.Sprintf("could not acquire the %s lease in time: %v", e.Kind, e.Err)
	}
	return fmt.Sprintf("could not acquire the %s lease: %v", e.Kind, e.Err)
}

func (e *AcquireError) Unwrap() error { return e.Err }

// Session holds a group's migration mutex and the operation's failover-hold,
// heartbeats and watches both, and reports their loss once.
type Session struct {
	cfg        SessionConfig
	clk        Clock
	generation int64
	mig, hold  *lease
	// tookOver: the migration lease was taken over from another runner.
	tookOver bool
	// phase is the furthest phase asked of the migration lease (MarkDDL,
	// Confirm, DDLStarted); renewals carry it.
	phaseMu sync.Mutex
	phase   Phase
	// outcome is what the release of the migration lease reports
	// (X-Deploy-Outcome); empty reports nothing. Guarded by phaseMu.
	outcome string
	// noPhases: the operator answered 400 to a phase (it is older than
	// phases): renewals carry none.
	noPhases atomic.Bool
	// noWatch: the operator does not serve the lease GET (older): the
	// session falls back to its heartbeat alone.
	noWatch atomic.Bool
	// api is the client every request goes through: cfg.Client, or, once
	// the namespace is pinned, a copy of it that names the namespace.
	api atomic.Pointer[Client]
	// ns is the pinned namespace; empty until one is given or learned.
	nsMu sync.Mutex
	ns   string

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

	// everAmbiguous: some grant attempt of this session went unanswered. A
	// later 200 may then re-grant the session's own lost grant, or another
	// runner's operation that the unanswered attempt re-granted: the two
	// cannot be told apart, so the 200 is contested either way; the flag
	// only changes what is said about it.
	everAmbiguous bool

	stop context.CancelFunc
	done chan struct{} // closed when the heartbeat and the watch ended
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

// client is the client the session's requests go through.
func (s *Session) client() *Client { return s.api.Load() }

// pin holds the namespace an answer named (what) to the pinned one: the
// first one named is pinned, and every later request of the session names
// it; another one is a *NamespaceError. An answer that names none (an
// older operator) changes nothing.
func (s *Session) pin(what, ns string) error {
	if ns == "" {
		return nil
	}
	s.nsMu.Lock()
	pinned := s.ns
	if pinned == "" {
		s.ns = ns
		s.api.Store(s.cfg.Client.inNamespace(ns))
	}
	s.nsMu.Unlock()
	// Learning it is not a progress line: Namespace tells it (the CLI
	// names it once both leases are held).
	if pinned != "" && pinned != ns {
		return &NamespaceError{Pinned: pinned, Answered: ns, Answer: what}
	}
	return nil
}

// Namespace is the group's namespace the session pinned: the client's, or
// the first one an answer named; empty while none is known.
func (s *Session) Namespace() string {
	s.nsMu.Lock()
	defer s.nsMu.Unlock()
	return s.ns
}

// TookOver reports whether the migration lease was taken over from another
// runner of the same operation.
func (s *Session) TookOver() bool { return s.tookOver }

// WatchesLeases reports whether the operator serves the lease GET (the
// session learns of a loss within about a second), false once it fell back
// to its heartbeat alone.
func (s *Session) WatchesLeases() bool { return !s.cfg.NoWatch && !s.noWatch.Load() }

// RecordsPhases reports whether the operator records the migration's phase,
// false once it answered 400 to one.
func (s *Session) RecordsPhases() bool { return !s.noPhases.Load() }

// wantPhase is the phase renewals of the migration lease carry.
func (s *Session) wantPhase() Phase {
	s.phaseMu.Lock()
	p := s.phase
	s.phaseMu.Unlock()
	if p.Before(PhaseDDL) && s.cfg.DDLStarted != nil && s.cfg.DDLStarted() {
		s.advance(PhaseDDL)
		return PhaseDDL
	}
	return p
}

// advance raises the phase renewals carry; it never moves back.
func (s *Session) advance(p Phase) {
	s.phaseMu.Lock()
	defer s.phaseMu.Unlock()
	if s.phase.Before(p) {
		s.phase = p
	}
}
