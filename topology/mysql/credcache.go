package mysql

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"k8s.io/utils/clock"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// DefaultCredentialTTL is how long a group's account is kept before it is
// read again.
const DefaultCredentialTTL = 5 * time.Minute

// CredentialCache keeps each group's account, with its TLS material, for
// TTL after Fetch read it (the operator's Fetch GETs the Secrets the group
// names: no Secret informer, so no list or watch of Secrets is needed). Failed reads are not kept.
// Invalidate forgets a group's account: the driver calls it when a site
// refuses the account or fails TLS verification, so a rotated password or
// CA is read again at once.
// Concurrent Gets of one group that find no fresh account share one read:
// the driver probes a group's sites in parallel, and each would otherwise
// read the Secret.
type CredentialCache struct {
	Fetch Credentials
	Clock clock.PassiveClock
	// TTL; DefaultCredentialTTL when zero.
	TTL time.Duration

	mu sync.Mutex
	m  map[credKey]credEntry
	// gen counts a key's Invalidates: a read that one overtook answers
	// its callers but is not kept.
	gen   map[credKey]uint64
	reads singleflight.Group
	// missHook, when set (tests), runs between a miss and the shared read.
	missHook func()
}

// credKey: a group, and the Secrets it names (spec.credentialsSecretRef,
// spec.tls): a group that names other Secrets reads them at once.
type credKey struct {
	uid, secret string
}

func (k credKey) String() string { return k.uid + "/" + k.secret }

type credEntry struct {
	acct Account
	at   time.Time
}

func keyOf(g *bloodravenv1alpha1.MysqlFailoverGroup) credKey {
	k := credKey{uid: string(g.UID)}
	if ref := g.Spec.CredentialsSecretRef; ref != nil {
		k.secret = ref.Name
	}
	if TLSRequired(g) {
		t := g.Spec.TLS
		k.secret += "|tls"
		for _, ref := range []*bloodravenv1alpha1.SecretReference{t.CASecretRef, t.ClientCertificateSecretRef} {
			k.secret += "|"
			if ref != nil {
				k.secret += ref.Name
			}
		}
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
// of starting another (singleflight), and an account that a read kept since
// this Get missed is used without another; ctx bounds only the wait of
// this caller.
func (c *CredentialCache) Get(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup) (Account, error) {
	k := keyOf(g)
	now := c.Clock.Now()
	if a, ok := c.fresh(k, now); ok {
		return a, nil
	}
	c.mu.Lock()
	gen := c.gen[k]
	c.mu.Unlock()
	if c.missHook != nil {
		c.missHook()
	}
	ch := c.reads.DoChan(k.String(), func() (any, error) {
		// A read that finished since the miss above kept its account
		// (it keeps it before it leaves the group): no second read.
		if a, ok := c.fresh(k, now); ok {
			return a, nil
		}
		return c.read(ctx, g, k, gen, now)
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return Account{}, res.Err
		}
		return res.Val.(Account), nil
	case <-ctx.Done():
		return Account{}, ctx.Err()
	}
}

// fresh is k's kept account while it is younger than TTL at now.
func (c *CredentialCache) fresh(k credKey, now time.Time) (Account, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || now.Sub(e.at) >= c.ttl() {
		return Account{}, false
	}
	return e.acct, true
}

// read fetches g's account and keeps it unless an Invalidate came after
// gen was read. A panicking Fetch is an error for every caller waiting.
func (c *CredentialCache) read(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, k credKey, gen uint64, at time.Time) (_ any, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("read credentials: panic: %v", v)
		}
	}()
	acct, err := c.Fetch(ctx, g)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.gen[k] == gen {
		if c.m == nil {
			c.m = map[credKey]credEntry{}
		}
		c.m[k] = credEntry{acct: acct, at: at}
	}
	// Entries past their TTL go: a deleted group's account, or one kept
	// under Secret names the group no longer uses, does not stay in
	// memory (passwords, client keys) for the life of the process.
	for other, e := range c.m {
		if at.Sub(e.at) >= c.ttl() {
			delete(c.m, other)
		}
	}
	c.mu.Unlock()
	return acct, nil
}

// Invalidate forgets g's account, and makes the next Get read again even
// while an older read is in progress.
func (c *CredentialCache) Invalidate(g *bloodravenv1alpha1.MysqlFailoverGroup) {
	k := keyOf(g)
	c.mu.Lock()
	delete(c.m, k)
	if c.gen == nil {
		c.gen = map[credKey]uint64{}
	}
	c.gen[k]++
	// Under mu, with the generation: no Get joins the overtaken read.
	c.reads.Forget(k.String())
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
