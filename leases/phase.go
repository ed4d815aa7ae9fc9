package leases

import "time"

// Phase is how far a migration operation's command got, as its renewals
// report it (docs/leases.md, "Verification gate"): before its DDL, inside it
// (the command started, or may have started, a schema change), or done
// (the command ended and succeeded; sent by the confirming renewal).
type Phase string

// Phases of a migration operation, in order.
const (
	PhasePreDDL Phase = "pre-ddl"
	PhaseDDL    Phase = "ddl"
	PhaseDone   Phase = "done"
)

// ParsePhase reads a phase as sent on the wire; ok is false for anything
// but the three phases.
func ParsePhase(s string) (Phase, bool) {
	switch p := Phase(s); p {
	case PhasePreDDL, PhaseDDL, PhaseDone:
		return p, true
	}
	return "", false
}

// rank orders the phases; the empty phase (a record written before phases
// existed, or never reported) is pre-ddl.
func (p Phase) rank() int {
	switch p {
	case PhaseDDL:
		return 1
	case PhaseDone:
		return 2
	}
	return 0
}

// After reports whether p is further along than q.
func (p Phase) After(q Phase) bool { return p.rank() > q.rank() }

// Effective is p, with the empty phase read as pre-ddl.
func (p Phase) Effective() Phase {
	if p == "" {
		return PhasePreDDL
	}
	return p
}

// UnconfirmedDDL tells whether r is a migration record whose operation
// ended (released, revoked, recorded expired, or past its expiry) after it
// reported its DDL boundary and before it confirmed its end: its schema
// change may be half-applied, and its instance must be verified by a person
// before the next migration (docs/leases.md, "Verification gate").
func (r *Record) UnconfirmedDDL(now time.Time) bool {
	return r != nil && r.Kind == KindMigration && r.Phase.Effective() == PhaseDDL && !r.Live(now)
}

// EndedAs names how a record that is not live ended: released, revoked, or
// expired (recorded so or not).
func (r *Record) EndedAs() State {
	switch r.State {
	case StateReleased, StateRevoked:
		return r.State
	}
	return StateExpired
}
