package authn

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	authv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"
)

// Identity is an authenticated ServiceAccount.
type Identity struct {
	Namespace      string
	ServiceAccount string
}

// Username is the Kubernetes user name of the identity.
func (i Identity) Username() string {
	return "system:serviceaccount:" + i.Namespace + ":" + i.ServiceAccount
}

// parseServiceAccount accepts only system:serviceaccount:<ns>:<name>.
func parseServiceAccount(username string) (Identity, bool) {
	rest, ok := strings.CutPrefix(username, "system:serviceaccount:")
	if !ok {
		return Identity{}, false
	}
	ns, name, ok := strings.Cut(rest, ":")
	if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return Identity{}, false
	}
	return Identity{Namespace: ns, ServiceAccount: name}, true
}

// Defaults of the TokenReview cache (docs/api.md).
const (
	DefaultCacheTTL  = 15 * time.Second
	DefaultCacheSize = 1024
)

// RefusedTTL is how long a token the TokenReview refused is refused without
// another review.
const RefusedTTL = 5 * time.Second

// ErrUnauthenticated: the request carries no bearer token, one refused
// locally, or one the TokenReview refused. It is the whole answer: no
// detail of why is given to the caller.
var ErrUnauthenticated = errors.New("unauthenticated")

// reviewTimeout bounds one TokenReview, which may serve several requests.
const reviewTimeout = 10 * time.Second

// Authenticator checks bearer tokens with TokenReview. Successful reviews are
// cached by the token's SHA-256 for ttl, but never past the token's own exp
// claim, in a bounded LRU. It is safe for concurrent use.
//
// A bearer token reaches the API server only when nothing here can answer
// for it, and what unauthenticated callers can make the API server do is
// bounded:
//
//   - Local refusal (401, no review): text that is not JWT-shaped (a
//     ServiceAccount token always is), and a token whose unverified claims
//     could not pass the review: aud (a string or an array) without our
//     audience, exp missing, unreadable or not after now, iss not a string.
//     The claims are decoded once and prove nothing; the review still
//     decides every token it accepts.
//   - Issuers: after a review authenticates a token, its unverified iss is
//     remembered, in a set of at most maxIssuers (the most recently
//     confirmed kept). Until one is known, any iss may be reviewed. Once one
//     is known, a token with another iss is reviewed only within a global
//     budget of unknownIssuerRate per second (burst unknownIssuerBurst), and
//     refused 401 without a review beyond it. The budget is what keeps an
//     issuer rotation from locking everyone out: the first token of the new
//     issuer that a review accepts teaches it, and the set's bound lets the
//     retired one age out.
//   - Per source: a review that would have to be sent (a miss: not cached,
//     not refused locally, no review of the same token in flight) takes a
//     token from its source address's bucket (sourceMissRate per second,
//     burst sourceMissBurst; the source is the host of r.RemoteAddr, the
//     buckets a bounded LRU of maxSources). An empty bucket answers 503
//     unavailable with Retry-After: 1 without a review (ErrBusy). Cache hits and local
//     refusals take nothing.
//   - Concurrency: at most maxConcurrentReviews reviews are in flight. A
//     miss that gets no slot within slotWait is ErrBusy too.
//   - Cached answers: a request whose token is cached (success or refusal)
//     never waits for a review or a slot. A success older than half the ttl
//     is still answered from the cache, and starts one background re-review
//     of its token (taking no source token; it waits for a slot, at most
//     until the entry expires, never holding the request). The re-review's
//     success renews the entry (again bounded by ttl and exp), its refusal
//     removes it, its error leaves it to expire. So a caller that keeps
//     using its token (a renewing pipeline) keeps hitting the cache, even
//     when it shares its source address with a flood of misses.
//
// Concurrent requests with the same uncached token wait for one review; a
// token the review refused is refused for RefusedTTL without another (a
// bounded LRU too). Errors of the API server are never cached. Only the
// token's hash is kept past its review; no token, hash or Authorization
// header is logged.
//
// Every time read goes through clock (the rate limits too); the slot wait
// is a duration on a timer, not a time read.
type Authenticator struct {
	reviews  authv1client.TokenReviewInterface
	audience string
	clock    clock.PassiveClock
	ttl      time.Duration
	cache    *lru.Cache // key -> cachedReview
	refused  *lru.Cache // key -> time.Time until which it is refused
	limits   reviewLimits

	// reviews shares one TokenReview among the requests (and the
	// background re-review) of one token; running counts the reviews in
	// flight (tests wait for none).
	inFlight singleflight.Group
	running  atomic.Int64

	mu sync.Mutex // guards issuers
	// issuers are the iss claims of tokens reviews accepted, the most
	// recently confirmed first; at most maxIssuers.
	issuers []string
	// missHook, when set (tests), runs between a cache miss and the
	// in-flight check.
	missHook func()
}

type cachedReview struct {
	id      Identity
	expires time.Time
	// refreshAt is when a hit starts a background re-review: half the ttl
	// after the review.
	refreshAt time.Time
}

// New is an Authenticator that sends its reviews to reviews (a client's
// TokenReviews()) and accepts tokens for audience; ttl and size bound its
// cache of successes (DefaultCacheTTL, DefaultCacheSize), and every time
// read goes through clk.
func New(reviews authv1client.TokenReviewInterface, audience string, clk clock.PassiveClock, ttl time.Duration, size int) *Authenticator {
	return &Authenticator{reviews: reviews, audience: audience, clock: clk, ttl: ttl, cache: lru.New(size), refused: lru.New(size),
		limits: newReviewLimits()}
}

// bearerToken extracts the token of an Authorization: Bearer header.
func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != "" && len(token) <= 16<<10
}

// Authenticate returns the caller's identity; ErrUnauthenticated; an error
// that wraps ErrBusy when the review may not be sent now (the source's rate,
// no free slot: answer 503 with Retry-After BusyRetryAfterSeconds); or the
// review's error (the API server's, or the request's context ended).
func (a *Authenticator) Authenticate(ctx context.Context, r *http.Request) (Identity, error) {
	token, ok := bearerToken(r)
	if !ok {
		return Identity{}, ErrUnauthenticated
	}
	now := a.clock.Now()
	key := sha256.Sum256([]byte(token))
	// A cached answer needs no look at the claims: only a plausible token
	// was ever reviewed, and a success is cached no longer than its exp.
	if id, hit, refresh, err := a.cached(key, now); hit {
		if refresh {
			if c, ok := parseClaims(token); ok {
				a.refreshAhead(ctx, token, c, key)
			}
		}
		return id, err
	}
	c, ok := parseClaims(token)
	if !ok || !a.plausible(c, now) {
		return Identity{}, ErrUnauthenticated
	}
	if a.missHook != nil {
		a.missHook()
	}
	// One review per token at a time: a miss joins the review in flight
	// (a background re-review too) and waits for it as long as its own
	// context lets it; the review does not end with any request.
	ch := a.flight(key, func() (Identity, error) {
		// A review that finished since the miss above has cached its
		// answer (it caches before it leaves the group).
		if id, hit, _, err := a.cached(key, now); hit {
			return id, err
		}
		a.mu.Lock()
		knownIssuer := a.issuerKnownLocked(c.iss)
		a.mu.Unlock()
		return a.admitAndReview(ctx, r, token, c, key, knownIssuer)
	})
	select {
	case res := <-ch:
		id, _ := res.Val.(Identity)
		return id, res.Err
	case <-ctx.Done():
		return Identity{}, fmt.Errorf("token review: %w", ctx.Err())
	}
}

// flight runs review as the one review of key in flight, or joins the one
// there is. Every caller's flight is counted in running from the call
// until its answer is handed over, which is after the review left the
// group: once running is 0, the next call starts a review of its own. A
// panic is an error for each caller (singleflight's DoChan would re-raise
// it where nothing can recover it).
func (a *Authenticator) flight(key [sha256.Size]byte, review func() (Identity, error)) <-chan singleflight.Result {
	a.running.Add(1)
	ch := a.inFlight.DoChan(string(key[:]), func() (id any, err error) {
		defer func() {
			if v := recover(); v != nil {
				id, err = Identity{}, fmt.Errorf("token review: panic: %v", v)
			}
		}()
		return review()
	})
	out := make(chan singleflight.Result, 1)
	go func() {
		res := <-ch
		a.running.Add(-1)
		out <- res
	}()
	return out
}

// admitAndReview sends the review of a miss if the limits let it: the
// issuer budget (an unknown issuer), the source's rate, a free slot.
func (a *Authenticator) admitAndReview(ctx context.Context, r *http.Request, token string, c claims, key [sha256.Size]byte, knownIssuer bool) (Identity, error) {
	now := a.clock.Now()
	// An unknown issuer over its budget is a local refusal: it must not
	// take from the source's bucket, so look before taking.
	if !knownIssuer && !a.limits.unknownIssuerAvailable(now) {
		return Identity{}, ErrUnauthenticated
	}
	if !a.limits.takeSource(sourceOf(r), now) {
		return Identity{}, errSourceOverRate
	}
	if !knownIssuer && !a.limits.takeUnknownIssuer(now) {
		return Identity{}, ErrUnauthenticated
	}
	release, ok := a.limits.acquire(a.limits.slotWait)
	if !ok {
		return Identity{}, errNoReviewSlot
	}
	defer release()
	// The review may answer other requests too: it does not end with this
	// request's context.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviewTimeout)
	defer cancel()
	return a.review(rctx, token, c, key)
}

// refreshAhead starts the background re-review of a cached success unless
// a review of its token is in flight (then it joins it: one review). It
// never blocks: the request is answered from the cache. A miss of the same
// token (the entry expired meanwhile) joins this review instead of sending
// another.
func (a *Authenticator) refreshAhead(ctx context.Context, token string, c claims, key [sha256.Size]byte) {
	bg := context.WithoutCancel(ctx)
	a.flight(key, func() (Identity, error) { return a.refresh(bg, token, c, key) })
}

// refresh re-reviews a cached success. It takes no source token; it waits
// for a slot at most until the entry expires (it holds no request). A
// refusal removes the entry (review does); an error leaves it to expire.
func (a *Authenticator) refresh(ctx context.Context, token string, c claims, key [sha256.Size]byte) (Identity, error) {
	wait := reviewTimeout
	if v, ok := a.cache.Get(key); ok {
		if left := v.(cachedReview).expires.Sub(a.clock.Now()); left < wait {
			wait = left
		}
	}
	release, ok := a.limits.acquire(wait)
	if !ok {
		return Identity{}, errNoReviewSlot
	}
	defer release()
	rctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	return a.review(rctx, token, c, key)
}

// cached is the cached answer for key: a live success, or a live refusal
// (ErrUnauthenticated); hit is false when there is none. refresh is true for
// a success due for its background re-review.
func (a *Authenticator) cached(key [sha256.Size]byte, now time.Time) (id Identity, hit, refresh bool, err error) {
	if v, ok := a.cache.Get(key); ok {
		if c := v.(cachedReview); now.Before(c.expires) {
			return c.id, true, !now.Before(c.refreshAt), nil
		}
		a.cache.Remove(key)
	}
	if v, ok := a.refused.Get(key); ok {
		if now.Before(v.(time.Time)) {
			return Identity{}, true, false, ErrUnauthenticated
		}
		a.refused.Remove(key)
	}
	return Identity{}, false, false, nil
}

// review asks the API server and caches the answer: success until the
// cache ttl or the token's exp, refusal for RefusedTTL (and no success
// cached any more). A success teaches the token's issuer.
func (a *Authenticator) review(ctx context.Context, token string, c claims, key [sha256.Size]byte) (Identity, error) {
	rv, err := a.reviews.Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{a.audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return Identity{}, fmt.Errorf("token review: %w", err)
	}
	now := a.clock.Now()
	st := rv.Status
	id, ok := parseServiceAccount(st.User.Username)
	if !reviewAccepts(st, a.audience) || !ok {
		a.cache.Remove(key)
		a.refused.Add(key, now.Add(RefusedTTL))
		return Identity{}, ErrUnauthenticated
	}
	a.learnIssuer(c.iss)
	if c.hasExp {
		expires := now.Add(a.ttl)
		if c.exp.Before(expires) {
			expires = c.exp
		}
		if now.Before(expires) {
			a.cache.Add(key, cachedReview{id: id, expires: expires, refreshAt: now.Add(a.ttl / 2)})
		}
	}
	return id, nil
}

// plausible reports whether a token's unverified claims could pass the
// review: our audience among aud, an exp after now, an iss that is a string
// (if any). The issuer set is checked on a miss only.
func (a *Authenticator) plausible(c claims, now time.Time) bool {
	return a.audience != "" && c.hasAudience(a.audience) && c.hasExp && now.Before(c.exp) && c.issOK
}

// issuerKnownLocked reports whether iss may be reviewed without the
// unknown-issuer budget: none is known yet, or it is one of them. a.mu is
// held.
func (a *Authenticator) issuerKnownLocked(iss string) bool {
	return len(a.issuers) == 0 || slices.Contains(a.issuers, iss)
}

// learnIssuer remembers iss, the issuer of a token a review accepted, as the
// most recently confirmed one; the set keeps at most maxIssuers.
func (a *Authenticator) learnIssuer(iss string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.issuers) > 0 && a.issuers[0] == iss {
		return
	}
	if i := slices.Index(a.issuers, iss); i >= 0 {
		a.issuers = slices.Delete(a.issuers, i, i+1)
	} else if len(a.issuers) == maxIssuers {
		a.issuers = a.issuers[:maxIssuers-1]
	}
	a.issuers = slices.Insert(a.issuers, 0, iss)
}

// jwtShaped reports whether token looks like a JWT: three base64url parts,
// the second a JSON object. It proves nothing (the review does); it keeps
// text that cannot be a ServiceAccount token from costing a review.
func jwtShaped(token string) bool {
	_, ok := parseClaims(token)
	return ok
}

// reviewAccepts reports whether a TokenReview that asked for audience
// authenticates the token for it. The TokenReview API leaves checking the
// audience to the client: status.audiences must contain ours. An empty
// status.audiences means the token is valid for the API server's own
// audience (or the Authenticator ignored spec.audiences), not for ours.
func reviewAccepts(st authenticationv1.TokenReviewStatus, audience string) bool {
	return st.Authenticated && audience != "" && slices.Contains(st.Audiences, audience)
}

// claims are the unverified claims of a JWT-shaped token that decide
// whether it is worth a review. They prove nothing.
type claims struct {
	// iss is the issuer ("" when absent); issOK is false when iss is
	// present but not a string.
	iss   string
	issOK bool
	// aud is the audience claim, a string or an array of strings (nil when
	// absent or anything else).
	aud []string
	// exp is the exp claim; hasExp is false when it is absent or unusable.
	exp    time.Time
	hasExp bool
}

func (c claims) hasAudience(audience string) bool { return slices.Contains(c.aud, audience) }

// parseClaims decodes a JWT's payload without verifying anything. ok is
// false when the token is not JWT-shaped: three dot-separated parts, the
// first and last not empty, the second base64url of a JSON object. Claim
// names are matched exactly (case-sensitive, as the API server does).
func parseClaims(token string) (c claims, ok bool) {
	header, rest, ok := strings.Cut(token, ".")
	if !ok || header == "" {
		return claims{}, false
	}
	body, sig, ok := strings.Cut(rest, ".")
	if !ok || sig == "" || strings.Contains(sig, ".") {
		return claims{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(body, "="))
	if err != nil || len(payload) < 2 || payload[0] != '{' {
		return claims{}, false
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(payload, &raw); err != nil {
		return claims{}, false
	}
	c.issOK = true
	if v, present := raw["iss"]; present {
		c.issOK = len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &c.iss) == nil
	}
	if v := raw["aud"]; len(v) > 0 {
		switch v[0] {
		case '"':
			var s string
			if json.Unmarshal(v, &s) == nil {
				c.aud = []string{s}
			}
		case '[':
			if json.Unmarshal(v, &c.aud) != nil {
				c.aud = nil
			}
		}
	}
	c.exp, c.hasExp = numericDate(raw["exp"])
	return c, true
}

// maxExp bounds the exp claims tokenExpiry accepts (the end of year 9999),
// far inside what time.Time represents.
const maxExp = 253402300799

// tokenExpiry reads the exp claim (NumericDate: seconds since the epoch) of a
// JWT's payload without verifying the signature: it only bounds how long an
// already successful TokenReview is cached. ok is false when the token is not
// a JWT or has no usable exp.
func tokenExpiry(token string) (exp time.Time, ok bool) {
	c, ok := parseClaims(token)
	if !ok {
		return time.Time{}, false
	}
	return c.exp, c.hasExp
}

// numericDate reads a NumericDate claim: a JSON number (not a string, not
// null) of seconds since the epoch, possibly with a fraction, in (0, maxExp].
func numericDate(v json.RawMessage) (time.Time, bool) {
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return time.Time{}, false
	}
	var n json.Number
	if err := json.Unmarshal(v, &n); err != nil {
		return time.Time{}, false
	}
	if sec, err := n.Int64(); err == nil {
		if sec <= 0 || sec > maxExp {
			return time.Time{}, false
		}
		return time.Unix(sec, 0), true
	}
	f, err := n.Float64() // NumericDate may have a fraction
	if err != nil || math.IsNaN(f) || f <= 0 || f > maxExp {
		return time.Time{}, false
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), true
}
