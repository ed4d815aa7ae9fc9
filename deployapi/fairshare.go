package deployapi

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/utils/lru"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shipstream/bloodraven/deployapi/authn"
	"github.com/shipstream/bloodraven/deployclient/wire"
)

// Fair share (docs/api.md, "Resolved (edges): fair share"; issue 35): one
// tenant's traffic never costs another tenant its authority. Every request of
// an authenticated identity (the ServiceAccount of the TokenReview) passes
// its identity's share after authentication and before anything else is
// read (the body, then authorization):
//
//   - a rate: a token bucket of FairShare.Rate requests per second, burst
//     FairShare.Burst;
//   - a number in flight: at most FairShare.InFlight requests of the
//     identity are being answered at once;
//   - held lease GETs: at most FairShare.HeldGets of its lease GETs are held
//     (Prefer: wait) at once. A held GET leaves the in-flight count when it
//     starts waiting (it does no work while it waits) and takes a held slot
//     instead. A lease GET past the cap is answered at once, as a GET without
//     Prefer: wait is (RFC 7240 lets a server ignore a preference): the
//     lease's state, never a 429, so a watching pipeline loses nothing.
//   - the authorization reads of the API server: at most FairShare.Reads
//     of the identity's uncached reads are in flight at once. An identity
//     that floods waits on its own reads, not on the client every identity
//     shares; its rate caps the reads it can cause per second, and Reads
//     caps how many of them the API server has queued at once, which is
//     what another tenant's renewal waits behind.
//
// Past the rate or the in-flight number the answer is
// 429 {"error":"rate_limited","retryAfterSeconds":N} with Retry-After: N,
// before the body is read and before any read of the API server: a 429
// changes nothing. Unauthenticated requests have no identity and never reach
// the share (their cost is bounded by the review limits of package authn).
//
// The state is bounded: the shares of at most maxIdentities identities, least
// recently used evicted. An identity idle long enough to be evicted has a
// full bucket and nothing in flight, which is what a new share starts with.
// Each request costs one lookup under one short lock, one token-bucket take
// and two atomic additions: O(1), whatever the number of identities.

// FairShare are the per-identity limits of the deployment API. A zero field
// takes its default.
type FairShare struct {
	// Rate is the requests per second one identity may send (default
	// DefaultRatePerIdentity); Burst the bucket's size (default
	// DefaultBurstPerIdentity).
	Rate  float64
	Burst int
	// InFlight is how many requests of one identity are answered at once
	// (default DefaultInFlightPerIdentity). Held lease GETs count only
	// until they start waiting.
	InFlight int
	// HeldGets is how many lease GETs of one identity are held at once
	// (default DefaultHeldGetsPerIdentity); past it a lease GET is answered
	// at once.
	HeldGets int
	// Reads is how many authorization reads of one identity the API
	// server is answering at once (default DefaultReadsPerIdentity); more
	// wait in the request, which stays in flight.
	Reads int
}

// Defaults of the fair share. A pipeline renews each lease every ttl/3 (at
// most every 5/3 s) and holds one lease GET per lease; it takes at most two
// leases (the migration and a failover-hold). So one pipeline sends under
// 1.2 requests per second, holds 2 GETs and has one or two in flight. The
// limits count per ServiceAccount, and teams run many pipelines under one
// (the soak runs 20 under the playground's one): 20 pipelines at the 5-s
// ttl send 24 requests per second and hold 40 GETs. The defaults leave room
// for that and their retries, and still stop a flood at 50 requests per
// second: 100 authorization reads, a fifth of --kube-api-qps.
//
// A request makes its two reads (the group and a database) at once, and
// each takes about a millisecond: those 24 requests per second keep under
// one read in flight on average, and 4 read slots let two requests of the
// identity read at once without waiting. A flood gets no more than those 4
// reads queued in the API server ahead of another tenant's renewal (the
// in-flight number, 16, was the cap before).
const (
	DefaultRatePerIdentity     = 50
	DefaultBurstPerIdentity    = 100
	DefaultInFlightPerIdentity = 16
	DefaultHeldGetsPerIdentity = 64
	DefaultReadsPerIdentity    = 4
)

// maxIdentities bounds the shares kept (least recently used evicted).
const maxIdentities = 4096

// Limits a request can be refused for: the limit label of
// bloodraven_deploy_api_rate_limited_total.
const (
	limitRate     = "rate"
	limitInFlight = "in_flight"
)

// inFlightRetryAfterSeconds is the retryAfterSeconds of a 429 for the
// in-flight number: the identity's own requests end within a round trip.
const inFlightRetryAfterSeconds = 1

// errRateLimited answers a request past its identity's share.
func errRateLimited(retryAfter int, limit string) *apiError {
	return &apiError{status: http.StatusTooManyRequests, code: codeRateLimited,
		extra: wire.Error{RetryAfterSeconds: int64(retryAfter)}, retryAfter: retryAfter,
		cause: fmt.Errorf("over the identity's %s limit", limit)}
}

func (f FairShare) withDefaults() FairShare {
	if f.Rate <= 0 {
		f.Rate = DefaultRatePerIdentity
	}
	if f.Burst <= 0 {
		f.Burst = DefaultBurstPerIdentity
	}
	if f.InFlight <= 0 {
		f.InFlight = DefaultInFlightPerIdentity
	}
	if f.HeldGets <= 0 {
		f.HeldGets = DefaultHeldGetsPerIdentity
	}
	if f.Reads <= 0 {
		f.Reads = DefaultReadsPerIdentity
	}
	return f
}

// fairShare holds the shares of the identities.
type fairShare struct {
	limits FairShare
	mu     sync.Mutex // makes a lookup and its add one step
	shares *lru.Cache // authn.Identity -> *share
}

// share is one identity's state.
type share struct {
	bucket   *rate.Limiter
	inFlight atomic.Int32
	held     atomic.Int32
	// reads are the identity's authorization reads in flight.
	reads chan struct{}
}

func newFairShare(limits FairShare) *fairShare {
	return &fairShare{limits: limits.withDefaults(), shares: lru.New(maxIdentities)}
}

func (f *fairShare) of(id authn.Identity) *share {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v, ok := f.shares.Get(id); ok {
		return v.(*share)
	}
	sh := &share{bucket: rate.NewLimiter(rate.Limit(f.limits.Rate), f.limits.Burst), reads: make(chan struct{}, f.limits.Reads)}
	f.shares.Add(id, sh)
	return sh
}

// admit takes a request of id at now from its share: a ticket the request
// ends with done, or the 429 and the limit it is over. A refusal takes
// nothing: a request refused for the number in flight keeps its token.
func (f *fairShare) admit(id authn.Identity, now time.Time) (*ticket, *apiError, string) {
	sh := f.of(id)
	if sh.inFlight.Add(1) > int32(f.limits.InFlight) {
		sh.inFlight.Add(-1)
		return nil, errRateLimited(inFlightRetryAfterSeconds, limitInFlight), limitInFlight
	}
	if !sh.bucket.AllowN(now, 1) {
		sh.inFlight.Add(-1)
		return nil, errRateLimited(f.retryAfter(sh, now), limitRate), limitRate
	}
	return &ticket{share: sh, inFlight: true, heldGets: int32(f.limits.HeldGets)}, nil, ""
}

// retryAfter is how many whole seconds until sh's bucket has a token again,
// at least 1.
func (f *fairShare) retryAfter(sh *share, now time.Time) int {
	missing := 1 - sh.bucket.TokensAt(now)
	return max(1, int(math.Ceil(missing/f.limits.Rate)))
}

// ticket is one admitted request's place in its identity's share. It is
// used by the request's goroutine only.
type ticket struct {
	share    *share
	inFlight bool
	held     bool
	heldGets int32
}

// hold moves a lease GET that is about to wait from the in-flight number to
// the held ones; false when the identity holds as many as it may (the GET is
// then answered at once). A call without a ticket (a test's) holds.
func (t *ticket) hold() bool {
	if t == nil {
		return true
	}
	if t.share.held.Add(1) > t.heldGets {
		t.share.held.Add(-1)
		return false
	}
	t.held = true
	t.leaveInFlight()
	return true
}

func (t *ticket) leaveInFlight() {
	if t.inFlight {
		t.inFlight = false
		t.share.inFlight.Add(-1)
	}
}

// done ends the request: it leaves what it took.
func (t *ticket) done() {
	t.leaveInFlight()
	if t.held {
		t.held = false
		t.share.held.Add(-1)
	}
}

// reader is the API server as the identity's authorization reads see it:
// each Get waits for one of the identity's read slots.
func (t *ticket) reader(api client.Reader) client.Reader {
	if t == nil {
		return api
	}
	return fairReader{Reader: api, reads: t.share.reads}
}

// fairReader bounds one identity's reads in flight.
type fairReader struct {
	client.Reader
	reads chan struct{}
}

func (r fairReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	select {
	case r.reads <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("wait for a read slot: %w", ctx.Err())
	}
	defer func() { <-r.reads }()
	return r.Reader.Get(ctx, key, obj, opts...)
}
