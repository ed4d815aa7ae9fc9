package authn

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/utils/lru"
)

// Limits on the TokenReviews that requests can cause (see Authenticator).
const (
	// maxConcurrentReviews bounds the reviews in flight, re-reviews
	// included.
	maxConcurrentReviews = 8
	// defaultSlotWait is how long a miss waits for a free slot before it
	// is ErrBusy.
	defaultSlotWait = 250 * time.Millisecond
	// sourceMissRate and sourceMissBurst are each source address's token
	// bucket for misses: the reviews its requests may cause.
	sourceMissRate  = 10 // per second
	sourceMissBurst = 20
	// maxSources bounds the buckets kept (least recently used evicted).
	maxSources = 4096
	// maxIssuers bounds the learned issuers.
	maxIssuers = 4
	// unknownIssuerRate and unknownIssuerBurst are the global budget of
	// reviews for tokens whose issuer is not (yet) known, once one is.
	unknownIssuerRate  = 1 // per second
	unknownIssuerBurst = 1
	// BusyRetryAfterSeconds is the Retry-After of a miss that may not be
	// reviewed now (ErrBusy).
	BusyRetryAfterSeconds = 1
)

// ErrBusy: the review a request needs may not be sent now. Transient: the
// request may be retried after BusyRetryAfterSeconds. The errors that wrap
// it say why (they are for the log, not the caller).
var ErrBusy = errors.New("token review not sent now")

var (
	errSourceOverRate = fmt.Errorf("%w: the source's misses are over their rate", ErrBusy)
	errNoReviewSlot   = fmt.Errorf("%w: no review slot free in time", ErrBusy)
)

// reviewLimits are the review slots and the rate limits of misses.
type reviewLimits struct {
	slots chan struct{}
	// slotWait is how long a miss waits for a slot (tests shorten it).
	slotWait time.Duration

	mu             sync.Mutex // makes a source's get-or-add one step
	sources        *lru.Cache // source host -> *rate.Limiter
	unknownIssuers *rate.Limiter
}

// The buckets are x/time/rate's, always asked with the injected clock's
// time (AllowN, TokensAt): they start full and refill at their rate up to
// their burst; a time before the last one refills nothing.
func newReviewLimits() reviewLimits {
	return reviewLimits{slots: make(chan struct{}, maxConcurrentReviews), slotWait: defaultSlotWait, sources: lru.New(maxSources),
		unknownIssuers: rate.NewLimiter(unknownIssuerRate, unknownIssuerBurst)}
}

// acquire takes a review slot, waiting at most wait. release gives it back.
// The wait is a timer (a duration), not a read of the clock.
func (l *reviewLimits) acquire(wait time.Duration) (release func(), ok bool) {
	release = func() { <-l.slots }
	select {
	case l.slots <- struct{}{}:
		return release, true
	default:
	}
	if wait <= 0 {
		return nil, false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case l.slots <- struct{}{}:
		return release, true
	case <-t.C:
		return nil, false
	}
}

// takeSource takes a miss from source's bucket; false when it is empty.
func (l *reviewLimits) takeSource(source string, now time.Time) bool {
	l.mu.Lock()
	var b *rate.Limiter
	if v, ok := l.sources.Get(source); ok {
		b = v.(*rate.Limiter)
	} else {
		b = rate.NewLimiter(sourceMissRate, sourceMissBurst)
		l.sources.Add(source, b)
	}
	l.mu.Unlock()
	return b.AllowN(now, 1)
}

// unknownIssuerAvailable reports whether the unknown-issuer budget has a
// review left, without taking it.
func (l *reviewLimits) unknownIssuerAvailable(now time.Time) bool {
	return l.unknownIssuers.TokensAt(now) >= 1
}

// takeUnknownIssuer takes a review from the unknown-issuer budget.
func (l *reviewLimits) takeUnknownIssuer(now time.Time) bool {
	return l.unknownIssuers.AllowN(now, 1)
}

// sourceOf is the address a request's misses are counted against: the host
// of r.RemoteAddr (the peer of the TLS connection; no header is trusted).
func sourceOf(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}
