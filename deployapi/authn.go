package deployapi

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
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
// cached by the token's SHA-256 for ttl, in a bounded LRU; failures are never
// cached, so a token that starts working is accepted at once.
type authenticator struct {
	kube     kubernetes.Interface
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
	return &authenticator{kube: kube, audience: audience, clock: clk, ttl: ttl, cache: lru.New(size)}
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
	review, err := a.kube.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{a.audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return Identity{}, fmt.Errorf("token review: %w", err)
	}
	st := review.Status
	if !st.Authenticated || (len(st.Audiences) > 0 && !slices.Contains(st.Audiences, a.audience)) {
		return Identity{}, errUnauthenticated
	}
	id, ok := parseServiceAccount(st.User.Username)
	if !ok {
		return Identity{}, errUnauthenticated
	}
	a.cache.Add(key, cachedReview{id: id, expires: now.Add(a.ttl)})
	return id, nil
}
