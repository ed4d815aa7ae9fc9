package prober

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/topology"
	"github.com/shipstream/bloodraven/topology/memory"
)

// counting counts the probes that reach the driver, per site.
type counting struct {
	*memory.Driver
	mu    sync.Mutex
	calls map[string]int
}

func (c *counting) ProbeSite(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, site string) (topology.SiteState, error) {
	c.mu.Lock()
	c.calls[string(g.UID)+"/"+site]++
	c.mu.Unlock()
	return c.Driver.ProbeSite(ctx, g, site)
}

func (c *counting) count(g *bloodravenv1alpha1.MysqlFailoverGroup, site string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[string(g.UID)+"/"+site]
}

func group(name, uid string) *bloodravenv1alpha1.MysqlFailoverGroup {
	g := &bloodravenv1alpha1.MysqlFailoverGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(uid)},
		Spec:       bloodravenv1alpha1.MysqlFailoverGroupSpec{Sites: []bloodravenv1alpha1.Site{{Name: "iad", Host: "db.example", Port: 3306}, {Name: "pdx", Host: "db2.example"}}},
	}
	g.Status.ActiveSite = "iad"
	return g
}

func newProber(t *testing.T) (*Prober, *counting, *clocktesting.FakeClock) {
	t.Helper()
	mem := memory.New()
	mem.HangCost = 50 * time.Millisecond
	d := &counting{Driver: mem, calls: map[string]int{}}
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	return &Prober{Driver: d, Clock: clk, Interval: time.Second}, d, clk
}

func TestAReconcileDoesNotDialASiteJustSeenDead(t *testing.T) {
	p, d, clk := newProber(t)
	g := group("a", "uid-a")
	d.Seed(g, "iad")
	d.Hang(g, "iad")
	ctx := context.Background()

	sites, err := p.Probe(ctx, g)
	if err != nil || sites[0].Reachable || !sites[1].Reachable {
		t.Fatalf("first probe: %+v %v", sites, err)
	}
	if n := d.count(g, "iad"); n != 1 {
		t.Fatalf("first probe dialed iad %d times, want 1", n)
	}
	// Within 2 × (Interval + ProbeTimeout): reported unreachable from memory.
	clk.Step(p.Interval)
	if sites, _ = p.Probe(ctx, g); sites[0].Reachable {
		t.Fatalf("a dead site was reported reachable: %+v", sites)
	}
	if n := d.count(g, "iad"); n != 1 {
		t.Fatalf("the reconcile dialed a site just seen dead (%d probes)", n)
	}
	if got := p.Dead(g); len(got) != 1 || got[0] != "iad" {
		t.Fatalf("Dead = %v", got)
	}
	// Older than that: dialed again; and a site that answers is reported
	// from this probe, never from memory.
	clk.Step(2 * (p.Interval + topology.ProbeTimeout))
	d.Revive(g, "iad")
	if sites, _ = p.Probe(ctx, g); !sites[0].Reachable || !sites[0].Writable {
		t.Fatalf("after revival: %+v", sites)
	}
	if n := d.count(g, "iad"); n != 2 {
		t.Fatalf("iad probed %d times, want 2", n)
	}
	if got := p.Dead(g); len(got) != 0 {
		t.Fatalf("Dead after revival = %v", got)
	}
}

func TestTheSitesOfAProbeAreProbedAtOnce(t *testing.T) {
	p, d, _ := newProber(t)
	g := group("a", "uid-a")
	d.Seed(g, "iad")
	d.HangCost = 400 * time.Millisecond
	d.Hang(g, "iad")
	d.Hang(g, "pdx")
	start := time.Now()
	if _, err := p.Probe(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	// Two hung sites one after the other would take 800 ms.
	if took := time.Since(start); took >= 800*time.Millisecond {
		t.Fatalf("two hung sites took %s: probed one after the other", took)
	}
}

// notified collects Notify calls.
type notified struct {
	mu  sync.Mutex
	got []types.NamespacedName
}

func (n *notified) add(nn types.NamespacedName) {
	n.mu.Lock()
	n.got = append(n.got, nn)
	n.mu.Unlock()
}

func (n *notified) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.got)
}

// tick steps the fake clock one interval and waits until the background
// probes it started have finished.
func tick(t *testing.T, p *Prober, clk *clocktesting.FakeClock) {
	t.Helper()
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(p.Interval)
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(20 * time.Millisecond)
		p.mu.Lock()
		busy := false
		for _, ep := range p.eps {
			busy = busy || ep.inFlight
		}
		p.mu.Unlock()
		if !busy || time.Now().After(deadline) {
			return
		}
	}
}

func TestTheBackgroundProberWakesAGroupWhosePrimaryIsLostAndWhenItReturns(t *testing.T) {
	p, d, clk := newProber(t)
	var n notified
	p.Notify = n.add
	a, b := group("a", "uid-a"), group("b", "uid-b") // the same hosts, two groups
	d.Seed(a, "iad")
	d.Seed(b, "iad")
	p.Track(a)
	p.Track(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { _ = p.Start(ctx); close(done) }()

	tick(t, p, clk) // both primaries answer: nothing to say
	if n.count() != 0 {
		t.Fatalf("notified %v with nothing lost", n.got)
	}
	d.Hang(a, "iad")
	tick(t, p, clk)
	if n.count() != 1 || n.got[0].Name != "a" {
		t.Fatalf("after a's primary hung: notified %v, want [a] only (b names the same host, its own endpoint)", n.got)
	}
	tick(t, p, clk) // still dead: no news
	if n.count() != 1 {
		t.Fatalf("a dead primary was announced again: %v", n.got)
	}
	d.Revive(a, "iad")
	tick(t, p, clk)
	if n.count() != 2 || n.got[1].Name != "a" {
		t.Fatalf("after the primary returned: notified %v", n.got)
	}
	// pdx is neither active nor dead: never probed in the background.
	if c := d.count(a, "pdx"); c != 0 {
		t.Fatalf("a quiet replica was probed %d times in the background", c)
	}
	p.Forget(types.NamespacedName{Namespace: "ns", Name: "a"})
	if got := p.Endpoints(); got != 2 {
		t.Fatalf("endpoints after forgetting a: %d, want b's 2", got)
	}
	cancel()
	<-done
}

func TestAMovedSiteStartsUnknown(t *testing.T) {
	p, d, _ := newProber(t)
	g := group("a", "uid-a")
	d.Seed(g, "iad")
	d.Hang(g, "iad")
	if _, err := p.Probe(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	d.Revive(g, "iad")
	g.Spec.Sites[0].Host = "db-new.example" // a new address is a new endpoint
	var probes atomic.Int32
	before := d.count(g, "iad")
	if sites, _ := p.Probe(context.Background(), g); !sites[0].Reachable {
		t.Fatalf("a moved site was reported dead from its old address: %+v", sites)
	}
	probes.Store(int32(d.count(g, "iad") - before))
	if probes.Load() != 1 {
		t.Fatalf("the moved site was probed %d times, want 1", probes.Load())
	}
}

func TestAResultYoungerThanTheIntervalStandsInForAProbeUntilTheControllerActs(t *testing.T) {
	p, d, clk := newProber(t)
	g := group("a", "uid-a")
	d.Seed(g, "iad")
	ctx := context.Background()
	if _, err := p.Probe(ctx, g); err != nil {
		t.Fatal(err)
	}
	d.Hang(g, "iad") // hung since: a dial would cost HangCost
	clk.Step(p.Interval / 2)
	if sites, _ := p.Probe(ctx, g); !sites[0].Reachable || d.count(g, "iad") != 1 {
		t.Fatalf("within the interval: %+v, %d probes of iad (want the earlier result, no dial)", sites, d.count(g, "iad"))
	}
	p.Invalidate(g) // the controller acted: the earlier result no longer stands
	if sites, _ := p.Probe(ctx, g); sites[0].Reachable || d.count(g, "iad") != 2 {
		t.Fatalf("after Invalidate: %+v, %d probes of iad (want a dial, which finds it dead)", sites, d.count(g, "iad"))
	}
	d.Revive(g, "iad")
	clk.Step(2 * (p.Interval + topology.ProbeTimeout))
	if sites, _ := p.Probe(ctx, g); !sites[0].Reachable {
		t.Fatalf("older than the interval: %+v, want a fresh dial", sites)
	}
}

// DeadSince is the end of the first failed probe of the current run: later
// failures keep it, an answer clears it.
func TestDeadSinceIsTheFirstFailedProbeOfTheRun(t *testing.T) {
	p, d, clk := newProber(t)
	g := group("a", "uid-a")
	d.Seed(g, "iad")
	ctx := context.Background()
	if _, err := p.Probe(ctx, g); err != nil {
		t.Fatal(err)
	}
	if s := p.DeadSince(g, "iad"); !s.IsZero() {
		t.Fatalf("an answering site has DeadSince %v", s)
	}
	d.Kill(g, "iad")
	clk.Step(2 * p.Interval)
	first := clk.Now()
	if _, err := p.Probe(ctx, g); err != nil {
		t.Fatal(err)
	}
	clk.Step(3 * (p.Interval + topology.ProbeTimeout)) // old enough to be dialed again
	if sites, _ := p.Probe(ctx, g); sites[0].Reachable || d.count(g, "iad") != 3 {
		t.Fatalf("second failure not probed: %+v, %d probes", sites, d.count(g, "iad"))
	}
	if s := p.DeadSince(g, "iad"); !s.Equal(first) {
		t.Fatalf("DeadSince %v, want the first failure %v", s, first)
	}
	d.Revive(g, "iad")
	clk.Step(3 * (p.Interval + topology.ProbeTimeout))
	if _, err := p.Probe(ctx, g); err != nil {
		t.Fatal(err)
	}
	if s := p.DeadSince(g, "iad"); !s.IsZero() {
		t.Fatalf("DeadSince %v after the site answered", s)
	}
	if s := p.DeadSince(g, "nowhere"); !s.IsZero() {
		t.Fatalf("an untracked site has DeadSince %v", s)
	}
}

// Track and Forget touch one group's endpoints: a site dropped from the
// spec is forgotten, Forget drops every endpoint tracked under the name
// (a group deleted and created again has a new UID), and other groups keep
// theirs.
func TestTrackAndForgetTouchOneGroup(t *testing.T) {
	p, _, _ := newProber(t)
	a, b := group("a", "uid-a"), group("b", "uid-b")
	p.Track(a)
	p.Track(b)
	if got := p.Endpoints(); got != 4 {
		t.Fatalf("%d endpoints, want 4", got)
	}
	a.Spec.Sites = a.Spec.Sites[:1]
	p.Track(a)
	if got := p.Endpoints(); got != 3 {
		t.Fatalf("after dropping a site of a: %d endpoints, want 3", got)
	}
	again := group("a", "uid-a2") // a recreated under the same name
	p.Track(again)
	if got := p.Endpoints(); got != 5 {
		t.Fatalf("with a's new incarnation: %d endpoints, want 5", got)
	}
	p.Forget(types.NamespacedName{Namespace: "ns", Name: "a"})
	if got := p.Endpoints(); got != 2 {
		t.Fatalf("after forgetting a: %d endpoints, want b's 2", got)
	}
	p.Track(a) // tracked again from nothing
	if got := p.Endpoints(); got != 3 {
		t.Fatalf("a tracked again: %d endpoints, want 3", got)
	}
}

// BenchmarkTrackInAFleet is the controller's per-reconcile Track of one
// group beside fleets of growing size: flat when Track touches only that
// group's endpoints (it walked all of them before, and at 5,000 groups that
// was a fifth of the operator's CPU in the site-loss bench).
func BenchmarkTrackInAFleet(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			p := &Prober{Clock: clocktesting.NewFakeClock(time.Now())}
			for i := range n {
				p.Track(group(fmt.Sprintf("g%d", i), fmt.Sprintf("uid-%d", i)))
			}
			g := group("g0", "uid-0")
			b.ResetTimer()
			for b.Loop() {
				p.Track(g)
			}
		})
	}
}

// gated is a driver whose probes of a site each wait for the test to hand
// them their answer: the test decides the order in which overlapping
// probes finish.
type gated struct {
	*memory.Driver
	started chan gatedProbe
}

// gatedProbe is one probe in progress; answer finishes it.
type gatedProbe struct{ answer chan topology.SiteState }

func (d *gated) ProbeSite(ctx context.Context, _ *bloodravenv1alpha1.MysqlFailoverGroup, site string) (topology.SiteState, error) {
	c := gatedProbe{answer: make(chan topology.SiteState)}
	select {
	case d.started <- c:
	case <-ctx.Done():
		return topology.SiteState{Name: site}, nil
	}
	select {
	case st := <-c.answer:
		return st, nil
	case <-ctx.Done():
		return topology.SiteState{Name: site}, nil
	}
}

// Two probes of one endpoint overlap; the one that started first finishes
// last, with what the site was before (here: unreachable, from before it
// returned). The prober keeps the result of the newest probe to start, not
// of the last to finish. At the fix it kept the last to finish: a site that
// answers was remembered dead, reported unreachable without being dialed,
// and listed by Dead.
func TestTheNewestProbeToStartWinsOverAnOlderOneThatFinishesLast(t *testing.T) {
	d := &gated{Driver: memory.New(), started: make(chan gatedProbe)}
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	p := &Prober{Driver: d, Clock: clk, Interval: time.Second}
	g := group("a", "uid-a")
	g.Spec.Sites = g.Spec.Sites[:1] // iad alone
	ctx := context.Background()

	probe := func() <-chan []topology.SiteState {
		done := make(chan []topology.SiteState, 1)
		go func() {
			sites, _ := p.Probe(ctx, g)
			done <- sites
		}()
		return done
	}
	started := func() gatedProbe {
		t.Helper()
		select {
		case c := <-d.started:
			return c
		case <-time.After(5 * time.Second):
			t.Fatal("the probe never reached the driver")
		}
		return gatedProbe{}
	}
	finished := func(done <-chan []topology.SiteState) []topology.SiteState {
		t.Helper()
		select {
		case sites := <-done:
			return sites
		case <-time.After(5 * time.Second):
			t.Fatal("the probe never finished")
		}
		return nil
	}

	olderDone := probe()
	older := started()
	newerDone := probe()
	newer := started()
	newer.answer <- topology.SiteState{Name: "iad", Reachable: true, Writable: true}
	if sites := finished(newerDone); !sites[0].Reachable {
		t.Fatalf("the newer probe: %+v", sites)
	}
	older.answer <- topology.SiteState{Name: "iad"} // stale: unreachable
	finished(olderDone)

	if dead := p.Dead(g); len(dead) != 0 {
		t.Fatalf("Dead = %v: the older probe, finishing last, overwrote the newer one's answer", dead)
	}
	if s := p.DeadSince(g, "iad"); !s.IsZero() {
		t.Fatalf("DeadSince = %v, want zero: the site answered the newest probe", s)
	}
	// Within the interval the stored result stands in for a probe: it is
	// the newer probe's.
	done := probe()
	select {
	case c := <-d.started:
		c.answer <- topology.SiteState{Name: "iad"}
		t.Fatalf("the site was dialed again within the interval: %+v", finished(done))
	case sites := <-done:
		if !sites[0].Reachable || !sites[0].Writable {
			t.Fatalf("the stored result is %+v, want the newer probe's (reachable, writable)", sites[0])
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the probe never finished")
	}
}
