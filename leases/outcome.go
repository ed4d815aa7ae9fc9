package leases

// Outcome is how a migration operation's client says its run ended, sent
// on the release of the migration lease (header X-Deploy-Outcome,
// docs/api.md). It is the client's word, recorded as such: the lease's own end
// (released, revoked, expired) is recorded beside it.
type Outcome string

// Outcomes a client may report.
const (
	OutcomeSucceeded     Outcome = "succeeded"
	OutcomeFailed        Outcome = "failed"
	OutcomeLostBeforeDDL Outcome = "lost-before-ddl"
	OutcomeLostAfterDDL  Outcome = "lost-after-ddl"
	OutcomeAbortFailed   Outcome = "abort-failed"
)

// OutcomeHeader is the request header of a release that carries the
// client's outcome.
const OutcomeHeader = "X-Deploy-Outcome"

// Outcomes are the values OutcomeHeader may carry, in the contract's order.
var Outcomes = []Outcome{OutcomeSucceeded, OutcomeFailed, OutcomeLostBeforeDDL, OutcomeLostAfterDDL, OutcomeAbortFailed}

// ParseOutcome returns the Outcome s names exactly.
func ParseOutcome(s string) (Outcome, bool) {
	for _, o := range Outcomes {
		if string(o) == s {
			return o, true
		}
	}
	return "", false
}
