package deployapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/store"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// GET /deploy/v1/groups/{group}/leases/{kind}/{operationId}: the lease's
// state, as a renewal would answer it but without renewing; with
// `Prefer: wait=N` the answer is held until the lease stops being the
// caller's or N seconds pass (docs/api.md, "Watching a lease").

// maxWatchWait bounds Prefer: wait=N.
const maxWatchWait = 60 * time.Second

// watchTick is how often a held request reads the clock and its
// replica's leadership: a leader that stops leading answers within it, and
// so does a wait or a lease that ends by time alone. It reads no cache:
// the caches are looked at when the informers report a change to the
// group or its Leases (changes.go), when the lease's expiry passes, or
// when a confirmation is due. Only a change the caches show is confirmed
// on fresh reads before it is answered.
const watchTick = 200 * time.Millisecond

// watchReconfirm bounds how often a held request re-reads the API server
// when the caches keep showing a change that fresh reads do not (a cache
// that lags): again at once when a cached object changes, else after this.
const watchReconfirm = time.Second

// parseWatch: the lease path, the X-Lease-Token header and Prefer: wait=N.
func parseWatch(r *http.Request, ps httprouter.Params, c *call) *apiError {
	if e := parseLeasePath(ps, c); e != nil {
		return e
	}
	c.token = r.Header.Get("X-Lease-Token")
	c.wait = preferWait(r.Header.Values("Prefer"))
	return nil
}

// preferWait reads the wait preference of RFC 7240 (`Prefer: wait=N`, N
// seconds), bounded to maxWatchWait. Other preferences and a malformed wait
// are ignored, as the RFC asks: the request is then answered at once.
func preferWait(values []string) time.Duration {
	for _, v := range values {
		for _, pref := range strings.Split(v, ",") {
			name, val, found := strings.Cut(strings.TrimSpace(pref), "=")
			if !found || !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			val, _, _ = strings.Cut(val, ";")
			n, err := strconv.ParseInt(strings.Trim(strings.TrimSpace(val), `"`), 10, 64)
			if err != nil || n <= 0 {
				return 0
			}
			return min(time.Duration(n)*time.Second, maxWatchWait)
		}
	}
	return 0
}

// watch answers the lease's state; held, it answers once the state is no
// longer a 200 (confirmed on fresh reads), when the wait ends (200, the
// lease as it stands), when this replica stops leading (503), when the
// process begins to stop (Drain: 200, the lease as it stands), or when the
// caller goes away. It never writes. Without Config.Informers nothing
// would wake it: the preference is ignored and the state answered at once.
func (s *Server) watch(r *http.Request, c *call, g *bloodravenv1alpha1.MysqlFailoverGroup) result {
	ctx := r.Context()
	res := s.leaseAnswer(ctx, c, g)
	if res.status != http.StatusOK || c.wait <= 0 || s.changes == nil {
		return res
	}
	// Past the identity's held GETs, the preference is ignored (RFC 7240):
	// the state as it stands, at once (fair share, fairshare.go).
	if !c.ticket.hold() {
		s.metrics.waitsNotHeld.WithLabelValues(c.route).Inc()
		return res
	}
	select {
	case <-s.draining:
		return res // stopping: the state as it stands, at once (Drain)
	default:
	}
	deadline := s.clock.Now().Add(c.wait)
	s.holding.Add(1)
	defer s.holding.Add(-1)
	tick := time.NewTicker(watchTick)
	defer tick.Stop()
	key := client.ObjectKeyFromObject(g)
	var (
		woken       = s.changes.next(key)
		look        = true    // the caches are to be looked at
		until       time.Time // when the cached lease ends by time alone
		lagging     bool      // the caches show a change fresh reads did not
		lastAlarm   watchMark // what the caches showed at the last confirmation
		lastConfirm time.Time // when fresh reads last confirmed
	)
	for {
		select {
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-s.draining:
			return res
		case <-woken:
			woken = s.changes.next(key) // before the look: a change during it wakes the next round
			look = true
		case <-tick.C:
		}
		if !s.cfg.IsLeader() {
			return fail(errNotLeader)
		}
		now := s.clock.Now()
		if !now.Before(deadline) {
			look = true // the wait's end answers the state as the caches show it
		}
		if !until.IsZero() && now.After(until) || lagging && now.Sub(lastConfirm) >= watchReconfirm {
			look = true
		}
		if !look {
			continue
		}
		look = false
		cached, mark, end := s.cachedLeaseState(ctx, c, g)
		until = end
		if cached {
			lagging = false
			if !now.Before(deadline) {
				return res
			}
			continue
		}
		// The caches say the lease stopped being the caller's. Confirm on
		// fresh reads; a cache that lags is asked again only once it
		// changes, or after watchReconfirm.
		lagging = true
		if mark == lastAlarm && now.Sub(lastConfirm) < watchReconfirm && now.Before(deadline) {
			continue
		}
		lastAlarm, lastConfirm = mark, now
		fresh, err := s.rereadGroup(ctx, g)
		if err != nil {
			return fail(err)
		}
		g = fresh
		if res = s.leaseAnswer(ctx, c, g); res.status != http.StatusOK || !now.Before(deadline) {
			return res
		}
	}
}

// watchMark identifies what the caches showed: the resourceVersions of the
// group and of the lease objects the state was decided on.
type watchMark struct{ group, lease, migration string }

// cachedLeaseState decides on the operator's caches alone whether the lease
// is still the caller's (true), what it decided on, and, for a lease still
// the caller's, when it ends by time alone (its expiry; a hold's, or its
// mutex's when that comes first). It reads nothing from the API server. A
// cache that cannot be read counts as a change, to be confirmed.
func (s *Server) cachedLeaseState(ctx context.Context, c *call, g *bloodravenv1alpha1.MysqlFailoverGroup) (held bool, mark watchMark, until time.Time) {
	cg := &bloodravenv1alpha1.MysqlFailoverGroup{}
	if err := s.groupCache().Get(ctx, client.ObjectKeyFromObject(g), cg); err != nil || cg.UID != g.UID {
		return false, watchMark{}, time.Time{}
	}
	if cg.Status.TopologyGeneration < g.Status.TopologyGeneration {
		cg = g // the cache lags the request's own fresh view
	}
	obj, own, err := s.leases.GetOwn(ctx, cg, c.kind, c.operationID, false)
	if err != nil {
		return false, watchMark{}, time.Time{}
	}
	mark = watchMark{group: cg.ResourceVersion}
	if obj != nil {
		mark.lease = obj.Lease.ResourceVersion
	}
	var mig *leases.Record
	if c.kind == leases.KindFailoverHold && own != nil {
		o, err := s.leases.Get(ctx, cg.Namespace, leases.MigrationName(cg.Name), false)
		if err != nil {
			return false, mark, time.Time{}
		}
		if o != nil {
			mark.migration = o.Lease.ResourceVersion
		}
		mig = leasestore.RecordOf(o)
	}
	d := policy.DecideRenew(policy.RenewInput{Kind: c.kind, OperationID: c.operationID, Token: c.token,
		Group: groupView(cg), Record: own, Migration: mig, Now: s.clock.Now()})
	if !stillHeld(d.Outcome) {
		return false, mark, time.Time{}
	}
	switch {
	case own == nil: // a view the caches do not hold yet (OutcomeStaleView): looked at again on their change
	case c.kind == leases.KindMigration:
		until = own.ExpiresAt
	default:
		until = leases.DeferralEnd(own, mig)
	}
	return true, mark, until
}

// groupCache is where a held request looks at the group: the cached reader
// of Config.Groups, or (without one) the API server.
func (s *Server) groupCache() client.Reader {
	if s.cfg.Groups != nil {
		return s.cfg.Groups
	}
	return s.api
}

// stillHeld: the outcomes of a renewal decision under which the lease is
// still the caller's. 423 is a refusal to renew, not an end of the lease.
func stillHeld(o policy.LeaseOutcome) bool {
	return o == policy.OutcomeRenew || o == policy.OutcomeUnstable || o == policy.OutcomeStaleView
}

// leaseAnswer is the lease's state as the contract answers it, decided on
// the cached lease and confirmed on fresh reads before any answer but 200.
// g is the request's fresh view of the group.
func (s *Server) leaseAnswer(ctx context.Context, c *call, g *bloodravenv1alpha1.MysqlFailoverGroup) result {
	var res result
	err := store.Retry(func(fresh bool) error {
		_, own, mig, tomb, err := s.leaseRecords(ctx, c, g, fresh)
		if err != nil {
			return err
		}
		if own != nil {
			res.instance = own.Instance
		}
		d := policy.DecideRenew(policy.RenewInput{Kind: c.kind, OperationID: c.operationID, Token: c.token,
			Group: groupView(g), Record: own, Migration: mig, Tombstone: tomb, Now: s.clock.Now()})
		switch {
		case d.Outcome == policy.OutcomeStaleView:
			return s.staleView(ctx, &g)
		case d.Outcome == policy.OutcomeRenew || d.Outcome == policy.OutcomeUnstable:
			res.status, res.body = http.StatusOK, bodyOf(own, g.Namespace)
			return nil
		case mustConfirm(d.Outcome) && !fresh:
			return store.ErrStale
		}
		// The fence (a generation older than the group's, even before the
		// tombstone is written) and the confirmed refusals.
		if e := refusal(d, g.Status.TopologyGeneration); e != nil {
			return e
		}
		return nil
	})
	if err != nil {
		res.err = err
	}
	return res
}
