package mysql

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// DefaultCredentialTTL is how long a group's account is kept before it is
// read again.
const DefaultCredentialTTL = 5 * time.Minute

// CredentialCache keeps each group's account for TTL after Fetch read it
// (the operator's Fetch is a GET of one Secret by name: no Secret informer,
// so no list or watch of Secrets is needed). Failed reads are not kept.
// Invalidate forgets a group's account: the driver calls it when a site
// refuses the account, so a rotated password is read again at once.
// Concurrent Gets of one group that find no fresh account share one read:
// the driver probes a group's sites in parallel, and each would otherwise
// read the Secret.
type CredentialCache struct {
	Fetch Credentials
	Clock clock.PassiveClock
	// TTL; DefaultCredentialTTL when zero.
	TTL time.Duration

	mu       sync.Mutex
	m        map[credKey]credEntry
	inflight map[credKey]*credRead
}

// credRead is one Fetch in progress; done is closed when it ended.
type credRead struct {
	done           chan struct{}
	user, password string
	err            error
}

type credKey struct {
	uid, secret string
}

type credEntry struct {
	user, password string
	at             time.Time
}

func keyOf(g *bloodravenv1alpha1.MysqlFailoverGroup) credKey {
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
// When it must read, a read already in progress for g is waited for instead
// of starting another; ctx bounds only the wait of this caller.
func (c *CredentialCache) Get(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup) (string, string, error) {
	k := keyOf(g)
	now := c.Clock.Now()
	c.mu.Lock()
	if e, ok := c.m[k]; ok && now.Sub(e.at) < c.ttl() {
		c.mu.Unlock()
		return e.user, e.password, nil
	}
	if r, ok := c.inflight[k]; ok {
		c.mu.Unlock()
		select {
		case <-r.done:
			return r.user, r.password, r.err
		case <-ctx.Done():
			return "", "", ctx.Err()
		}
	}
	r := &credRead{done: make(chan struct{})}
	if c.inflight == nil {
		c.inflight = map[credKey]*credRead{}
	}
	c.inflight[k] = r
	c.mu.Unlock()

	r.user, r.password, r.err = c.Fetch(ctx, g)
	if r.err != nil {
		r.user, r.password = "", ""
	}
	c.mu.Lock()
	// A read that Invalidate overtook may hold the refused account: it
	// answers its callers but is not kept.
	if c.inflight[k] == r {
		delete(c.inflight, k)
		if r.err == nil {
			if c.m == nil {
				c.m = map[credKey]credEntry{}
			}
			c.m[k] = credEntry{user: r.user, password: r.password, at: now}
		}
	}
	c.mu.Unlock()
	close(r.done)
	return r.user, r.password, r.err
}

// Invalidate forgets g's account, and makes the next Get read again even
// while an older read is in progress.
func (c *CredentialCache) Invalidate(g *bloodravenv1alpha1.MysqlFailoverGroup) {
	c.mu.Lock()
	delete(c.m, keyOf(g))
	delete(c.inflight, keyOf(g))
	c.mu.Unlock()
}

// NewCached returns a driver whose credentials come from a CredentialCache
// over fetch, invalidated when a site refuses them. The cache reads clk;
// so do the driver's waits when clk can wait (a clock.Clock, as the
// operator's clock.WithTicker is).
func NewCached(fetch Credentials, clk clock.PassiveClock) *Driver {
	cc := &CredentialCache{Fetch: fetch, Clock: clk}
	d := New(cc.Get)
	d.CredentialsRejected = cc.Invalidate
	if c, ok := clk.(clock.Clock); ok {
		d.Clock = c
	}
	return d
}
