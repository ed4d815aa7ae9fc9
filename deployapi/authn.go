package deployapi

import (
	"bytes"
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
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
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

// Defaults of the TokenReview cache (DESIGN §3).
const (
	DefaultAuthCacheTTL  = 15 * time.Second
	DefaultAuthCacheSize = 1024
)

// refusedTTL is how long a token the TokenReview refused is refused without
// another review.
const refusedTTL = 5 * time.Second

// reviewTimeout bounds one TokenReview, which may serve several requests.
const reviewTimeout = 10 * time.Second

// authenticator checks bearer tokens with TokenReview. Successful reviews are
// cached by the token's SHA-256 for ttl, but never past the token's own exp
// claim, in a bounded LRU; a token without a readable exp is reviewed on
// every request.
//
// What a review costs is bounded: concurrent requests with the same
// uncached token wait for one review; a token the review refused is refused
// for refusedTTL without another (a bounded LRU too); a bearer token that is
// not JWT-shaped (a ServiceAccount token always is) is refused without a
// review. Errors of the API server are never cached.
type authenticator struct {
	reviews  authv1client.TokenReviewInterface
	audience string
	clock    clock.PassiveClock
	ttl      time.Duration
	cache    *lru.Cache // key -> cachedReview
	refused  *lru.Cache // key -> time.Time until which it is refused

	mu       sync.Mutex
	inflight map[[sha256.Size]byte]*review
	// missHook, when set (tests), runs between a cache miss and the
	// in-flight check.
	missHook func()
}

type cachedReview struct {
	id      Identity
	expires time.Time
}

// review is one TokenReview in flight; done closes when id and err are set.
type review struct {
	done chan struct{}
	id   Identity
	err  error
}

func newAuthenticator(kube kubernetes.Interface, audience string, clk clock.PassiveClock, ttl time.Duration, size int) *authenticator {
	return newAuthenticatorFor(kube.AuthenticationV1().TokenReviews(), audience, clk, ttl, size)
}

func newAuthenticatorFor(reviews authv1client.TokenReviewInterface, audience string, clk clock.PassiveClock, ttl time.Duration, size int) *authenticator {
	return &authenticator{reviews: reviews, audience: audience, clock: clk, ttl: ttl, cache: lru.New(size), refused: lru.New(size),
		inflight: map[[sha256.Size]byte]*review{}}
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

// authenticate returns the caller's identity, errUnauthenticated, or an
// error of the API server (which maps to 503/500).
func (a *authenticator) authenticate(ctx context.Context, r *http.Request) (Identity, error) {
	token, ok := bearerToken(r)
	if !ok || !jwtShaped(token) {
		return Identity{}, errUnauthenticated
	}
	key := sha256.Sum256([]byte(token))
	now := a.clock.Now()
	if id, hit, err := a.cached(key, now); hit {
		return id, err
	}
	if a.missHook != nil {
		a.missHook()
	}
	a.mu.Lock()
	if f, ok := a.inflight[key]; ok {
		a.mu.Unlock()
		select {
		case <-f.done:
			return f.id, f.err
		case <-ctx.Done():
			return Identity{}, fmt.Errorf("token review: %w", ctx.Err())
		}
	}
	// A review that finished since the miss above has cached its answer
	// (it caches before it leaves inflight).
	if id, hit, err := a.cached(key, now); hit {
		a.mu.Unlock()
		return id, err
	}
	f := &review{done: make(chan struct{}), err: errors.New("token review did not finish")}
	a.inflight[key] = f
	a.mu.Unlock()
	defer func() { // also if the review panics: waiters get f.err
		a.mu.Lock()
		delete(a.inflight, key)
		a.mu.Unlock()
		close(f.done)
	}()
	// The review may answer other requests too: it does not end with this
	// request's context.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviewTimeout)
	defer cancel()
	id, err := a.review(rctx, token, key)
	f.id, f.err = id, err
	return id, err
}

// cached is the cached answer for key: a live success, or a live refusal
// (errUnauthenticated); hit is false when there is none.
func (a *authenticator) cached(key [sha256.Size]byte, now time.Time) (id Identity, hit bool, err error) {
	if v, ok := a.cache.Get(key); ok {
		if c := v.(cachedReview); now.Before(c.expires) {
			return c.id, true, nil
		}
		a.cache.Remove(key)
	}
	if v, ok := a.refused.Get(key); ok {
		if now.Before(v.(time.Time)) {
			return Identity{}, true, errUnauthenticated
		}
		a.refused.Remove(key)
	}
	return Identity{}, false, nil
}

// review asks the API server and caches the answer: success until the
// cache ttl or the token's exp, refusal for refusedTTL.
func (a *authenticator) review(ctx context.Context, token string, key [sha256.Size]byte) (Identity, error) {
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
		a.refused.Add(key, now.Add(refusedTTL))
		return Identity{}, errUnauthenticated
	}
	if exp, ok := tokenExpiry(token); ok {
		expires := now.Add(a.ttl)
		if exp.Before(expires) {
			expires = exp
		}
		if now.Before(expires) {
			a.cache.Add(key, cachedReview{id: id, expires: expires})
		}
	}
	return id, nil
}

// jwtShaped reports whether token looks like a JWT: three base64url parts,
// the second a JSON object. It proves nothing (the review does); it keeps
// text that cannot be a ServiceAccount token from costing a review.
func jwtShaped(token string) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] == "" || parts[2] == "" {
		return false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	return err == nil && len(payload) > 1 && payload[0] == '{' && json.Valid(payload)
}

// reviewAccepts reports whether a TokenReview that asked for audience
// authenticates the token for it. The TokenReview API leaves checking the
// audience to the client: status.audiences must contain ours. An empty
// status.audiences means the token is valid for the API server's own
// audience (or the authenticator ignored spec.audiences), not for ours.
func reviewAccepts(st authenticationv1.TokenReviewStatus, audience string) bool {
	return st.Authenticated && audience != "" && slices.Contains(st.Audiences, audience)
}

// maxExp bounds the exp claims tokenExpiry accepts (the end of year 9999),
// far inside what time.Time represents.
const maxExp = 253402300799

// tokenExpiry reads the exp claim (NumericDate: seconds since the epoch) of a
// JWT's payload without verifying the signature: it only bounds how long an
// already successful TokenReview is cached. ok is false when the token is not
// a JWT or has no usable exp.
func tokenExpiry(token string) (exp time.Time, ok bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims map[string]any
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(&claims); err != nil {
		return time.Time{}, false
	}
	n, ok := claims["exp"].(json.Number) // a number, not a string
	if !ok {
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
