package mysql

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// DefaultCredentialTTL is how long a group's account is kept before it is
// read again.
const DefaultCredentialTTL = 5 * time.Minute

// CredentialCache keeps each group's account for TTL after Fetch read it
// (the operator's Fetch is a GET of one Secret by name: no Secret informer,
// so no list or watch of Secrets is needed). Failed reads are not kept.
// Invalidate forgets a group's account: the driver calls it when a site
// refuses the account, so a rotated password is read again at once.
type CredentialCache struct {
	Fetch Credentials
	Clock clock.PassiveClock
	// TTL; DefaultCredentialTTL when zero.
	TTL time.Duration

	mu sync.Mutex
	m  map[credKey]credEntry
}

type credKey struct {
	uid, secret string
}

type credEntry struct {
	user, password string
	at             time.Time
}

func keyOf(g *v1.MysqlFailoverGroup) credKey {
	k := credKey{uid: string(g.UID)}
	if ref := g.Spec.CredentialsSecretRef; ref != nil {
		k.secret = ref.Name
	}
	return k
}

func (c *CredentialCache) ttl() time.Duration {
	if c.TTL > 0 {
		return c.TTL
	}
	return DefaultCredentialTTL
}

// Get returns g's account, from the cache while it is younger than TTL.
func (c *CredentialCache) Get(ctx context.Context, g *v1.MysqlFailoverGroup) (string, string, error) {
	k := keyOf(g)
	now := c.Clock.Now()
	c.mu.Lock()
	e, ok := c.m[k]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < c.ttl() {
		return e.user, e.password, nil
	}
	user, pw, err := c.Fetch(ctx, g)
	if err != nil {
		return "", "", err
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[credKey]credEntry{}
	}
	c.m[k] = credEntry{user: user, password: pw, at: now}
	c.mu.Unlock()
	return user, pw, nil
}

// Invalidate forgets g's account.
func (c *CredentialCache) Invalidate(g *v1.MysqlFailoverGroup) {
	c.mu.Lock()
	delete(c.m, keyOf(g))
	c.mu.Unlock()
}

// NewCached returns a driver whose credentials come from a CredentialCache
// over fetch, invalidated when a site refuses them.
func NewCached(fetch Credentials, clk clock.PassiveClock) *Driver {
	cc := &CredentialCache{Fetch: fetch, Clock: clk}
	d := New(cc.Get)
	d.CredentialsRejected = cc.Invalidate
	return d
}
