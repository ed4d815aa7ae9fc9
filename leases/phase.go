package leases

// Phase is how far a migration operation's command got, as its renewals
// report it (DESIGN §5, "Verification gate"): before its DDL, inside it
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
