package prober

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/topology"
	"github.com/shipstream/bloodraven/topology/memory"
)

// counting counts the probes that reach the driver, per site.
type counting struct {
	*memory.Driver
	mu    sync.Mutex
	calls map[string]int
}

func (c *counting) ProbeSite(ctx context.Context, g *v1.MysqlFailoverGroup, site string) (topology.SiteState, error) {
	c.mu.Lock()
	c.calls[string(g.UID)+"/"+site]++
	c.mu.Unlock()
	return c.Driver.ProbeSite(ctx, g, site)
}

func (c *counting) count(g *v1.MysqlFailoverGroup, site string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[string(g.UID)+"/"+site]
}

func group(name, uid string) *v1.MysqlFailoverGroup {
	g := &v1.MysqlFailoverGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(uid)},
		Spec:       v1.MysqlFailoverGroupSpec{Sites: []v1.Site{{Name: "iad", Host: "db.example", Port: 3306}, {Name: "pdx", Host: "db2.example"}}},
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
