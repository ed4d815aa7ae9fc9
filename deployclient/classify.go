package deployclient

import (
	"errors"
	"net/http"
	"time"
)

// verdict is what one answer about a lease means for it.
type verdict int

const (
	// confirmed: authority was confirmed; the new deadline is the moment
	// the request was sent plus the ttl answered.
	confirmed verdict = iota
	// transient: nothing was confirmed and nothing ended; keep asking
	// inside the deadline.
	transient
	// terminal: the lease is lost.
	terminal
)

func (v verdict) String() string {
	return [...]string{"confirmed", "transient", "terminal"}[v]
}

// renewal is one renewal (or confirming renewal) and its answer.
type renewal struct {
	kind string
	// sent is when the request was sent, answered when its answer came.
	sent, answered time.Time
	lease          *Lease
	err            error
	// phase is the phase the (last) request carried.
	phase Phase
}

// lease state the answer is judged against.
type judged struct {
	// lossAt: the moment the lease counts as lost without a confirmation
	// (its confirmed deadline less the margin).
	lossAt time.Time
	// deadline is the last confirmed deadline, for the loss's report.
	deadline time.Time
	// generation is the grant's topology generation.
	generation int64
}

// classification is classify's answer: the verdict, the new deadline of a
// confirmed answer, and the loss of a terminal one.
type classification struct {
	verdict  verdict
	deadline time.Time
	ttl      time.Duration
	lost     *LostError
}

// classify decides what an answer means. Pure: the rules of the contract's
// fence on the client's side.
//   - A 200 confirms only if it arrived before the loss moment and carries
//     the grant's generation; the new deadline is sent + the answered ttl
//     (never the server's expiresAt).
//   - A 200 that arrives after the loss moment is a loss: the work ran
//     unconfirmed for a moment.
//   - A 200 at another generation is a loss: the primary moved.
//   - 423, 503, 429, 401 and transport failures are transient before the
//     loss moment, and a loss (deadline passed) after it.
//   - Every other answer ends the lease (terminalAnswer), an answer for
//     another namespace than the pinned one (*NamespaceError) included.
func classify(r renewal, j judged) classification {
	late := !r.answered.Before(j.lossAt)
	if r.err == nil {
		switch {
		case late:
			return classification{verdict: terminal, lost: &LostError{Kind: r.kind, Cause: CauseDeadlinePassed, GrantGeneration: j.generation, Deadline: j.deadline,
				Err: errors.New("the renewal was answered only after the deadline")}}
		case r.lease.TopologyGeneration != j.generation:
			return classification{verdict: terminal, lost: &LostError{Kind: r.kind, Cause: CauseGenerationChanged, Generation: r.lease.TopologyGeneration,
				GrantGeneration: j.generation, Deadline: j.deadline}}
		}
		ttl := time.Duration(r.lease.TTLSeconds) * time.Second
		return classification{verdict: confirmed, deadline: r.sent.Add(ttl), ttl: ttl}
	}
	if lost := terminalAnswer(r.kind, r.err); lost != nil {
		lost.GrantGeneration, lost.Deadline = j.generation, j.deadline
		return classification{verdict: terminal, lost: lost}
	}
	if late {
		return classification{verdict: terminal, lost: &LostError{Kind: r.kind, Cause: CauseDeadlinePassed, GrantGeneration: j.generation, Deadline: j.deadline, Err: r.err}}
	}
	return classification{verdict: transient}
}

// terminalAnswer maps an answer that ends the lease to its LostError; nil
// for a transient one.
func terminalAnswer(kind string, err error) *LostError {
	var ne *NamespaceError
	if errors.As(err, &ne) {
		return &LostError{Kind: kind, Cause: CauseNamespaceMismatch, Err: err}
	}
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
