package prober

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/topology"
)

// Defaults of the prober.
const (
	// DefaultInterval is how often a watched endpoint (an active site, or a
	// site last seen dead) is probed in the background.
	DefaultInterval = time.Second
	// DefaultParallel bounds the probes in flight at once. A hung site holds
	// its slot for topology.ProbeTimeout, so a lost site of N groups is
	// seen in about ceil(N/DefaultParallel) × ProbeTimeout.
	DefaultParallel = 2048
)

// Prober probes the sites of every tracked group, each endpoint on its own,
// and remembers what it saw. See the package documentation.
type Prober struct {
	// Driver probes one site (topology.SiteProber); a driver without
	// ProbeSite is probed a whole group at a time.
	Driver topology.Driver
	Clock  clock.WithTicker
	// Interval between two background probes of one watched endpoint;
	// DefaultInterval when zero.
	Interval time.Duration
	// Parallel bounds the probes in flight; DefaultParallel when zero.
	Parallel int
	// Notify is told when a watched endpoint changes reachability: an
	// active site lost, a lost site answering again. The controller
	// reconciles that group at once, ahead of routine work. It is called
	// from a probe's goroutine, never under the prober's lock.
	Notify func(group types.NamespacedName)

	once sync.Once
	sem  chan struct{}
	mu   sync.Mutex
	eps  map[key]*endpoint
	// sites and uids index eps by group, so that Track and Forget touch one
	// group's endpoints, not the fleet's: the site names tracked for each
	// group UID, and the UIDs tracked under each name.
	sites map[types.UID]map[string]struct{}
	uids  map[types.NamespacedName]map[types.UID]struct{}
}

// key names an endpoint: a site of one group (by UID), at one address.
// Two groups that name the same host have two endpoints.
type key struct {
	uid  types.UID
	site string
}

type endpoint struct {
	group  types.NamespacedName
	spec   bloodravenv1alpha1.Site
	g      *bloodravenv1alpha1.MysqlFailoverGroup // the latest copy tracked, for the driver
	active bool
	// state is the result of the newest probe to start among those that
	// finished (see started); seenAt when it finished (zero: never probed).
	state  topology.SiteState
	seenAt time.Time
	// deadSince is when the endpoint was first seen unreachable in the
	// current run of failures; zero while it answers.
	deadSince time.Time
	// usable: state may stand in for a probe until then (seenAt +
	// Interval); Invalidate clears it after the controller acted.
	usable   time.Time
	inFlight bool
	// started numbers the probes of this endpoint in the order they
	// started; stateSeq is the number of the probe whose result state
	// holds. A result of a probe that started before it is dropped: two
	// probes of one endpoint overlap (a reconcile's and the background's,
	// or two reconciles'), and the one that started first may finish last
	// with what the site was before.
	started, stateSeq uint64
}

// begin numbers a probe of ep that starts now. Called under p.mu.
func (ep *endpoint) begin() uint64 {
	ep.started++
	return ep.started
}

func (p *Prober) init() {
	p.once.Do(func() {
		if p.Parallel <= 0 {
			p.Parallel = DefaultParallel
		}
		if p.Interval <= 0 {
			p.Interval = DefaultInterval
		}
		p.sem = make(chan struct{}, p.Parallel)
		p.eps = map[key]*endpoint{}
		p.sites = map[types.UID]map[string]struct{}{}
		p.uids = map[types.NamespacedName]map[types.UID]struct{}{}
	})
}

// Track records g's sites and its active site. The controller calls it on
// every reconcile with the group it just read.
func (p *Prober) Track(g *bloodravenv1alpha1.MysqlFailoverGroup) {
	p.init()
	gc := g.DeepCopy()
	nn := types.NamespacedName{Namespace: g.Namespace, Name: g.Name}
	p.mu.Lock()
	defer p.mu.Unlock()
	tracked := p.sites[g.UID]
	if tracked == nil {
		tracked = map[string]struct{}{}
		p.sites[g.UID] = tracked
		if p.uids[nn] == nil {
			p.uids[nn] = map[types.UID]struct{}{}
		}
		p.uids[nn][g.UID] = struct{}{}
	}
	inSpec := make(map[string]bool, len(g.Spec.Sites))
	for _, s := range g.Spec.Sites {
		inSpec[s.Name] = true
		k := key{g.UID, s.Name}
		ep := p.eps[k]
		if ep == nil || ep.spec != s {
			ep = &endpoint{spec: s} // a new address starts unknown
			p.eps[k] = ep
		}
		tracked[s.Name] = struct{}{}
		ep.group, ep.g, ep.active = nn, gc, s.Name == g.Status.ActiveSite
	}
	for site := range tracked {
		if !inSpec[site] {
			delete(p.eps, key{g.UID, site})
			delete(tracked, site)
		}
	}
}

// Forget drops every endpoint of the group (a deleted group, or one this
// replica no longer reconciles).
func (p *Prober) Forget(group types.NamespacedName) {
	p.init()
	p.mu.Lock()
	defer p.mu.Unlock()
	for uid := range p.uids[group] {
		for site := range p.sites[uid] {
			delete(p.eps, key{uid, site})
		}
		delete(p.sites, uid)
	}
	delete(p.uids, group)
}

// Endpoints counts the tracked endpoints.
func (p *Prober) Endpoints() int {
	p.init()
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.eps)
}

// freshDead is how long a failed probe lets a reconcile skip the endpoint.
// The background prober probes a dead endpoint again at the first tick
// after its last probe ended, and a hung one takes ProbeTimeout: results
// come at most Interval + ProbeTimeout apart, and twice that leaves room for
// a late one. A return is not delayed by it: the background probe that sees
// the endpoint answer clears it at once.
func (p *Prober) freshDead() time.Duration { return 2 * (p.Interval + topology.ProbeTimeout) }

// Probe is the reconcile's one probe of g: every site at once, each bounded
// by topology.ProbeTimeout. A site probed within the last Interval (in the
// background: the active site; or by an earlier reconcile), or within
// Interval + ProbeTimeout while a background probe of it is under way, is
// reported as that probe saw it, unless the controller acted on the group since
// (Invalidate). A site the prober saw dead within the last
// 2 × (Interval + ProbeTimeout) is reported unreachable without dialing it
// (it is probed in the background meanwhile, and its return wakes the
// group). All others are probed now. Sites come back in spec order. So a
// hung primary never holds a reconcile: the background prober pays for it.
func (p *Prober) Probe(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup) ([]topology.SiteState, error) {
	p.Track(g)
	out := make([]topology.SiteState, len(g.Spec.Sites))
	now := p.Clock.Now()
	var wg sync.WaitGroup
	for i, s := range g.Spec.Sites {
		k := key{g.UID, s.Name}
		p.mu.Lock()
		ep := p.eps[k]
		var recent *topology.SiteState
		var seq uint64
		switch {
		case ep == nil:
		case now.Before(ep.usable), // probed within the last Interval
			// or a background probe is under way, and its result is at
			// most ProbeTimeout late: waiting for it, or dialing the
			// endpoint a second time, would hold this reconcile instead.
			ep.inFlight && !ep.usable.IsZero() && now.Before(ep.usable.Add(topology.ProbeTimeout)):
			st := ep.state
			recent = &st
		case !ep.deadSince.IsZero() && now.Sub(ep.seenAt) < p.freshDead():
			recent = &topology.SiteState{Name: s.Name}
		}
		if recent == nil && ep != nil {
			seq = ep.begin()
		}
		p.mu.Unlock()
		if recent != nil {
			out[i] = *recent
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = p.probeSite(ctx, g, s.Name)
			if ep != nil {
				p.record(k, ep, seq, out[i], false)
			}
		}()
	}
	wg.Wait()
	return out, ctx.Err()
}

// Invalidate makes the next Probe of g dial every site it does not know to
// be dead: the controller acted on g's data plane, so what the prober saw
// before no longer stands in for a probe.
func (p *Prober) Invalidate(g *bloodravenv1alpha1.MysqlFailoverGroup) {
	p.init()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range g.Spec.Sites {
		if ep := p.eps[key{g.UID, s.Name}]; ep != nil {
			ep.usable = time.Time{}
		}
	}
}

// Dead lists the sites of g the prober last saw unreachable.
func (p *Prober) Dead(g *bloodravenv1alpha1.MysqlFailoverGroup) []string {
	p.init()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, s := range g.Spec.Sites {
		if ep := p.eps[key{g.UID, s.Name}]; ep != nil && !ep.deadSince.IsZero() {
			out = append(out, s.Name)
		}
	}
	return out
}

// DeadSince is when the prober first saw site of g unreachable in its
// current run of failed probes (a failed probe's end); zero when the site
// answered its last probe, or is not tracked.
func (p *Prober) DeadSince(g *bloodravenv1alpha1.MysqlFailoverGroup, site string) time.Time {
	p.init()
	p.mu.Lock()
	defer p.mu.Unlock()
	if ep := p.eps[key{g.UID, site}]; ep != nil {
		return ep.deadSince
	}
	return time.Time{}
}

// probeSite probes one site, bounded by topology.ProbeTimeout.
func (p *Prober) probeSite(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, site string) topology.SiteState {
	ctx, cancel := context.WithTimeout(ctx, topology.ProbeTimeout)
	defer cancel()
	if sp, ok := p.Driver.(topology.SiteProber); ok {
		st, err := sp.ProbeSite(ctx, g, site)
		if err != nil {
			return topology.SiteState{Name: site}
		}
		return st
	}
	sites, err := p.Driver.Probe(ctx, g)
	if err == nil {
		for _, s := range sites {
			if s.Name == site {
				return s
			}
		}
	}
	return topology.SiteState{Name: site}
}

// record stores the result of probe seq of ep, the endpoint k when the
// probe started, unless a probe of it that started later has stored its own
// already (the newest probe to start wins, not the last to finish), or the
// endpoint was forgotten or replaced (a new address) meanwhile. notify,
// when set, tells Notify about a change of reachability of a watched
// endpoint.
func (p *Prober) record(k key, ep *endpoint, seq uint64, st topology.SiteState, notify bool) {
	now := p.Clock.Now()
	p.mu.Lock()
	if p.eps[k] != ep || seq < ep.stateSeq {
		p.mu.Unlock()
		return
	}
	was := ep.state.Reachable && !ep.seenAt.IsZero()
	wasDead := !ep.deadSince.IsZero()
	ep.state, ep.seenAt, ep.usable, ep.stateSeq = st, now, now.Add(p.Interval), seq
	switch {
	case !st.Reachable && ep.deadSince.IsZero():
		ep.deadSince = now
	case st.Reachable:
		ep.deadSince = time.Time{}
	}
	changed := (was && !st.Reachable) || (wasDead && st.Reachable)
	group := ep.group
	p.mu.Unlock()
	if notify && changed && p.Notify != nil {
		p.Notify(group)
	}
}

// watched tells whether the background loop probes ep: the active site of
// its group, and any site last seen dead (so its return is noticed).
func (ep *endpoint) watched() bool { return ep.active || !ep.deadSince.IsZero() }

// Start probes every watched endpoint each Interval until ctx ends; one
// probe per endpoint is in flight at a time. It is a manager.Runnable.
func (p *Prober) Start(ctx context.Context) error {
	p.init()
	t := p.Clock.NewTicker(p.Interval)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
		p.mu.Lock()
		var due []key
		for k, ep := range p.eps {
			if ep.watched() && !ep.inFlight {
				ep.inFlight = true
				due = append(due, k)
			}
		}
		p.mu.Unlock()
		for _, k := range due {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.background(ctx, k)
			}()
		}
	}
}

// NeedLeaderElection: only the leader, whose controller acts, probes.
func (p *Prober) NeedLeaderElection() bool { return true }

func (p *Prober) background(ctx context.Context, k key) {
	defer func() {
		p.mu.Lock()
		if ep := p.eps[k]; ep != nil {
			ep.inFlight = false
		}
		p.mu.Unlock()
	}()
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	defer func() { <-p.sem }()
	p.mu.Lock()
	ep := p.eps[k]
	var g *bloodravenv1alpha1.MysqlFailoverGroup
	var seq uint64
	if ep != nil {
		g, seq = ep.g, ep.begin()
	}
	p.mu.Unlock()
	if g == nil {
		return
	}
	p.record(k, ep, seq, p.probeSite(ctx, g, k.site), true)
}
