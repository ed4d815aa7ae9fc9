package deployclient

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// watchWait is how long one lease GET is held: below the API's 60 s bound,
// so a request is renewed before any idle timeout in between.
const watchWait = 50 * time.Second

// watch keeps one lease GET open for l besides its renewals, so the
// session learns within about a second that the lease stopped being its own
// (a new generation, a revocation, a release or re-grant by another token,
// its expiry). A terminal answer loses the session, as a renewal's would.
// An operator that does not serve the lease GET (405, or a 404 that a
// renewal contradicts) is older than this client: the session says so and
// relies on its heartbeat alone.
func (s *Session) watch(ctx context.Context, l *lease) {
	for attempt := 1; ; attempt++ {
		if s.noWatch.Load() {
			return
		}
		token, ttl, _, _ := l.snapshot()
		sent := s.clk.Now()
		lease, err := s.client().Watch(ctx, s.cfg.Group, l.kind, s.cfg.OperationID, token, watchWait)
		if err == nil {
			// An answer for another namespace is a loss (terminalAnswer).
			err = s.pin("GET "+l.kind+" lease", lease.Namespace)
		}
		if ctx.Err() != nil {
			return
		}
		var ae *APIError
		errors.As(err, &ae)
		switch {
		case err == nil:
			attempt = 0
			// A held answer comes after watchWait; one that came at once
			// (a server that ignores Prefer: wait) must not make this a
			// busy loop.
			if s.clk.Now().Sub(sent) < time.Second && !sleep(s.clk, time.Second, ctx.Done(), nil) {
				return
			}
			continue
		case ae != nil && (ae.Status == http.StatusMethodNotAllowed || ae.Status == http.StatusNotFound && ae.Code != CodeNotFound):
			s.fallBackToHeartbeat(ae)
			return
		case ae != nil && ae.Status == http.StatusNotFound:
			// Either the lease ended, or an older operator names no such
			// route: a renewal tells which. Its terminal answer loses the
			// session; a confirmed one shows the GET is not served.
			if c, _ := s.renewNow(ctx, l, ""); c.verdict == confirmed {
				s.fallBackToHeartbeat(ae)
				return
			} else if c.verdict == terminal {
				return
			}
		default:
			if lost := terminalAnswer(l.kind, err); lost != nil {
				_, _, _, deadline := l.snapshot()
				lost.GrantGeneration, lost.Deadline = s.generation, deadline
				s.lose(lost)
				return
			}
		}
		// Transient (503, a dropped connection, 423): ask again soon; the
		// heartbeat keeps the deadline meanwhile.
		if !sleep(s.clk, min(retryPause(err, ttl), backoff(attempt, nil)), ctx.Done(), nil) {
			return
		}
	}
}

// fallBackToHeartbeat records that the operator does not serve the lease
// GET, once.
func (s *Session) fallBackToHeartbeat(ae *APIError) {
	if s.noWatch.CompareAndSwap(false, true) {
		s.progress("the operator does not serve the lease GET (it answered %d %s): it is older than this client; a loss is learned at the next renewal (every ttl/3), not within a second", ae.Status, ae.Code)
	}
}
