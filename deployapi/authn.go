package deployapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
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

// authenticator checks bearer tokens with TokenReview. Successful reviews are
// cached by the token's SHA-256 for ttl, but never past the token's own exp
// claim, in a bounded LRU; a token without a readable exp is reviewed on
// every request. Failures are never cached, so a token that starts working is
// accepted at once.
type authenticator struct {
	reviews  authv1client.TokenReviewInterface
	audience string
	clock    clock.PassiveClock
	ttl      time.Duration
	cache    *lru.Cache
}

type cachedReview struct {
	id      Identity
	expires time.Time
}

func newAuthenticator(kube kubernetes.Interface, audience string, clk clock.PassiveClock, ttl time.Duration, size int) *authenticator {
	return newAuthenticatorFor(kube.AuthenticationV1().TokenReviews(), audience, clk, ttl, size)
}

func newAuthenticatorFor(reviews authv1client.TokenReviewInterface, audience string, clk clock.PassiveClock, ttl time.Duration, size int) *authenticator {
	return &authenticator{reviews: reviews, audience: audience, clock: clk, ttl: ttl, cache: lru.New(size)}
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
	if !ok {
		return Identity{}, errUnauthenticated
	}
	key := sha256.Sum256([]byte(token))
	now := a.clock.Now()
	if v, ok := a.cache.Get(key); ok {
		if c := v.(cachedReview); now.Before(c.expires) {
			return c.id, nil
		}
		a.cache.Remove(key)
	}
	review, err := a.reviews.Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{a.audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return Identity{}, fmt.Errorf("token review: %w", err)
	}
	st := review.Status
	if !reviewAccepts(st, a.audience) {
		return Identity{}, errUnauthenticated
	}
	id, ok := parseServiceAccount(st.User.Username)
	if !ok {
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
