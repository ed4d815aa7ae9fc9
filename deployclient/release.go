package deployclient

import (
	"context"
	"errors"
	"fmt"
)

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

// ReportOutcome sets the outcome the release of the migration mutex
// reports to the operator (header X-Deploy-Outcome, recorded in the
// operation's DeployRun): OutcomeSucceeded, OutcomeFailed,
// OutcomeLostBeforeDDL, OutcomeLostAfterDDL or OutcomeAbortFailed. The
// report is sent even when authority was already lost (the operator
// answers 204 and records it on the ended lease). Call it before Release.
func (s *Session) ReportOutcome(outcome string) {
	s.phaseMu.Lock()
	s.outcome = outcome
	s.phaseMu.Unlock()
}

// stopHeartbeat stops l's heartbeat and watch and waits for both.
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
	var outcome string
	if l == s.mig {
		s.phaseMu.Lock()
		outcome = s.outcome
		s.phaseMu.Unlock()
	}
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		if err = s.client().ReleaseReporting(ctx, s.cfg.Group, l.kind, s.cfg.OperationID, token, outcome); err == nil || !Transient(err) {
			break
		}
		if !sleep(s.clk, backoff(attempt, nil), ctx.Done(), nil) {
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
