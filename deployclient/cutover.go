package deployclient

import (
	"context"
	"fmt"
	"time"

	"github.com/shipstream/bloodraven/deployclient/wire"
)

// CutOver is the group's side of an online schema change's cut-over, as the
// observation shows it.
type CutOver = wire.CutOver

// Reasons a cut-over is refused. The group's reasons come from the
// observation (docs/online-schema-change.md); the run adds its own two.
const (
	CutOverPlannedOperationDue     = wire.CutOverPlannedOperationDue
	CutOverPlannedOperationPending = wire.CutOverPlannedOperationPending
	CutOverGroupUnstable           = wire.CutOverGroupUnstable
	// CutOverGenerationMoved: the group's generation is not the one the
	// run was granted at: the primary moved, and the run's authority with it.
	CutOverGenerationMoved = "GenerationMoved"
	// CutOverDeadlineTooClose: the leases' confirmed deadline leaves less
	// than the cut-over's budget: a renewal is late.
	CutOverDeadlineTooClose = "LeaseDeadlineTooClose"
	// CutOverObservationFailed: the group could not be read; the run
	// retries, and its leases' renewals decide whether it is still held.
	CutOverObservationFailed = "ObservationFailed"
)

// CutOverInput is what a run's cut-over is judged on.
type CutOverInput struct {
	Now time.Time
	// Observation is the group as GET answered it.
	Observation *Group
	// GrantGeneration is the generation the run's leases were granted at.
	GrantGeneration int64
	// Deadline is the earliest confirmed deadline of the run's leases.
	Deadline time.Time
	// Budget is how long the tool's cut-over may take: the margin the
	// deadline and any planned operation's deferral budget must leave.
	Budget time.Duration
}

// CutOverDecision is whether the run may cut over now and, when not, the
// first reason and a message for the log.
type CutOverDecision struct {
	Allowed bool
	Reason  string
	Message string
}

// DecideCutOver judges a run's cut-over: the generation is the grant's, the
// group allows it (its observation's cutOver: no planned operation due or
// pending, the group stable), no deferral budget runs out within Budget,
// and the confirmed deadline leaves at least Budget. Pure; the checks are
// made in that order and the first that fails names the refusal.
func DecideCutOver(in CutOverInput) CutOverDecision {
	g := in.Observation
	if g.TopologyGeneration != in.GrantGeneration {
		return CutOverDecision{Reason: CutOverGenerationMoved, Message: fmt.Sprintf(
			"the group is at topology generation %d, the run was granted at %d: the primary moved", g.TopologyGeneration, in.GrantGeneration)}
	}
	switch co := g.CutOver; {
	case co == nil && !g.Stable:
		// An operator older than cut-overs sends no cutOver block: the
		// group's stability is all it says.
		return CutOverDecision{Reason: CutOverGroupUnstable, Message: "the group is not stable: " + g.UnstableReason}
	case co != nil && !co.Allowed:
		reason := co.Reason
		if reason == "" {
			reason = CutOverGroupUnstable
		}
		return CutOverDecision{Reason: reason, Message: co.Message}
	}
	if a := g.Admission; a != nil {
		if at, err := time.Parse(time.RFC3339Nano, a.BudgetExhaustsAt); err == nil && at.Sub(in.Now) < in.Budget {
			return CutOverDecision{Reason: CutOverPlannedOperationDue, Message: fmt.Sprintf(
				"the deferral budget of %s %q runs out at %s, within the cut-over budget %s", a.Operation, a.ID, a.BudgetExhaustsAt, in.Budget)}
		}
	}
	if left := in.Deadline.Sub(in.Now); left < in.Budget {
		return CutOverDecision{Reason: CutOverDeadlineTooClose, Message: fmt.Sprintf(
			"the leases' confirmed deadline is %s away, less than the cut-over budget %s", max(left, 0).Round(100*time.Millisecond), in.Budget)}
	}
	return CutOverDecision{Allowed: true}
}

// CutOverRefusedError is returned by WaitCutOver when ctx ended while the
// cut-over was refused: Last is the last refusal.
type CutOverRefusedError struct {
	Last CutOverDecision
	Err  error
}

func (e *CutOverRefusedError) Error() string {
	if e.Last.Reason == "" {
		return fmt.Sprintf("no cut-over: %v", e.Err)
	}
	return fmt.Sprintf("no cut-over: %v while it was refused: %s: %s", e.Err, e.Last.Reason, e.Last.Message)
}

func (e *CutOverRefusedError) Unwrap() error { return e.Err }

// CutOverPoll is how often WaitCutOver observes the group while it waits.
const CutOverPoll = time.Second

// CheckCutOver observes the group once and judges the run's cut-over
// (DecideCutOver) with the leases' earliest confirmed deadline. An
// observation that fails is a refusal (ObservationFailed).
func (s *Session) CheckCutOver(ctx context.Context, budget time.Duration) CutOverDecision {
	g, err := s.client().Observe(ctx, s.cfg.Group)
	if err != nil {
		return CutOverDecision{Reason: CutOverObservationFailed, Message: err.Error()}
	}
	deadline := s.Deadline(KindMigration)
	if h := s.Deadline(KindFailoverHold); h.Before(deadline) {
		deadline = h
	}
	return DecideCutOver(CutOverInput{Now: s.clk.Now(), Observation: g, GrantGeneration: s.generation, Deadline: deadline, Budget: budget})
}

// WaitCutOver waits until the run may cut over (CheckCutOver, every
// CutOverPoll) and returns nil; the caller then marks the DDL boundary at
// once (MarkDDL) before the tool cuts over. It returns the session's loss
// as soon as a lease is lost while it waits, and a *CutOverRefusedError
// when ctx ends first. refused, when set, hears each new refusal.
func (s *Session) WaitCutOver(ctx context.Context, budget time.Duration, refused func(CutOverDecision)) error {
	var last CutOverDecision
	for {
		if err := s.Err(); err != nil {
			return err
		}
		d := s.CheckCutOver(ctx, budget)
		if err := s.Err(); err != nil {
			return err
		}
		if d.Allowed {
			return nil
		}
		if ctx.Err() == nil {
			if (d.Reason != last.Reason || d.Message != last.Message) && refused != nil {
				refused(d)
			}
			last = d
		}
		if !sleep(s.clk, CutOverPoll, ctx.Done(), s.ctx.Done()) {
			if err := s.Err(); err != nil {
				return err
			}
			return &CutOverRefusedError{Last: last, Err: ctx.Err()}
		}
	}
}
