package mysql

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/topology"
)

// secret is a Credentials that counts its reads (a GET of the Secret).
type secret struct {
	mu       sync.Mutex
	password string
	reads    int
}

func (s *secret) fetch(context.Context, *bloodravenv1alpha1.MysqlFailoverGroup) (Account, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	return Account{User: "bloodraven", Password: s.password}, nil
}

func (s *secret) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

func TestCredentialsAreReadOncePerTTLAndAgainWhenRefused(t *testing.T) {
	st := startSites(t)
	sec := &secret{password: "wrong"} // a rotation the operator has not seen
	clk := clocktesting.NewFakeClock(time.Now())
	d := NewCached(sec.fetch, clk)
	t.Cleanup(d.Close)
	g := st.group.DeepCopy()
	g.UID = types.UID("uid-orders")
	ctx := context.Background()

	if s, _ := d.ProbeSite(ctx, g, "iad"); s.Reachable {
		t.Fatalf("a refused account probed reachable: %+v", s)
	}
	sec.mu.Lock()
	sec.password = "s3cret" // the Secret now holds the right one
	sec.mu.Unlock()
	// The refusal (error 1045) dropped the cached account: the next probe
	// reads the Secret again at once, well inside the TTL.
	if s, _ := d.ProbeSite(ctx, g, "iad"); !s.Reachable {
		t.Fatalf("after the Secret was fixed: %+v (%d reads)", s, sec.count())
	}
	reads := sec.count()
	for i := 0; i < 5; i++ {
		if _, err := d.Probe(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	if got := sec.count(); got != reads {
		t.Fatalf("routine probes read the Secret %d more times, want none within the TTL", got-reads)
	}
	clk.Step(DefaultCredentialTTL + time.Second)
	if _, err := d.Probe(ctx, g); err != nil {
		t.Fatal(err)
	}
	if got := sec.count(); got != reads+1 {
		t.Fatalf("after the TTL: %d reads, want %d", got, reads+1)
	}
}

func TestTwoGroupsNamingTheSameHostShareNoPool(t *testing.T) {
	st := startSites(t)
	a, b := st.group.DeepCopy(), st.group.DeepCopy()
	a.UID, b.UID = "uid-a", "uid-b"
	b.Name = "other"
	ctx := context.Background()
	for _, g := range []*bloodravenv1alpha1.MysqlFailoverGroup{a, b} {
		if _, err := st.driver.Probe(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	st.driver.mu.Lock()
	pools := 0
	for k := range st.driver.dbs {
		if k.uid == "uid-a" || k.uid == "uid-b" {
			pools++
		}
	}
	st.driver.mu.Unlock()
	if pools != 4 {
		t.Fatalf("%d pools for two groups of two sites on the same hosts, want 4 (one per group and address)", pools)
	}
}

func TestAProbeOfTwoPausedSitesTakesOneProbeBound(t *testing.T) {
	st := startSites(t)
	ctx := context.Background()
	if _, err := st.driver.Probe(ctx, st.group); err != nil { // pools and dialects ready
		t.Fatal(err)
	}
	for _, s := range []interface{ Pause() error }{st.iad, st.pdx} {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = st.iad.Resume(); _ = st.pdx.Resume() })
	start := time.Now()
	sites, err := st.driver.Probe(ctx, st.group)
	took := time.Since(start)
	if err != nil || sites[0].Reachable || sites[1].Reachable {
		t.Fatalf("paused sites: %+v %v", sites, err)
	}
	// One after the other, two hung sites would cost two bounds.
	if took >= 2*topology.ProbeTimeout {
		t.Fatalf("probing two paused sites took %s: not in parallel (bound %s each)", took, topology.ProbeTimeout)
	}
}

// gatedFetch is a Credentials that counts its reads; each read answers
// answer(n) for the n-th read, and the first waits until release is closed.
type gatedFetch struct {
	mu      sync.Mutex
	reads   int
	release chan struct{}
	answer  func(n int) string
}

func newGatedFetch(answer func(n int) string) *gatedFetch {
	return &gatedFetch{release: make(chan struct{}), answer: answer}
}

func (f *gatedFetch) fetch(context.Context, *bloodravenv1alpha1.MysqlFailoverGroup) (Account, error) {
	f.mu.Lock()
	f.reads++
	n := f.reads
	f.mu.Unlock()
	if n == 1 {
		<-f.release
	}
	return Account{User: "bloodraven", Password: f.answer(n)}, nil
}

func (f *gatedFetch) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

func (f *gatedFetch) cache() (*CredentialCache, *bloodravenv1alpha1.MysqlFailoverGroup) {
	g := &bloodravenv1alpha1.MysqlFailoverGroup{}
	g.UID = "uid-orders"
	return &CredentialCache{Clock: clocktesting.NewFakeClock(time.Now()), Fetch: f.fetch}, g
}

// TestConcurrentProbesOfOneGroupShareOneSecretRead pins what the TTL test
// above flaked on in CI: the driver probes a group's sites in parallel, and
// each site found the cached account expired, so the Secret was read twice.
func TestConcurrentProbesOfOneGroupShareOneSecretRead(t *testing.T) {
	f := newGatedFetch(func(int) string { return "s3cret" })
	cc, g := f.cache()
	const callers = 8
	var started, done sync.WaitGroup
	started.Add(callers)
	done.Add(callers)
	errs := make(chan error, callers)
	for i := 0; i < callers; i++ {
		go func() {
			defer done.Done()
			started.Done()
			a, err := cc.Get(context.Background(), g)
			if err == nil && (a.User != "bloodraven" || a.Password != "s3cret") {
				t.Errorf("got %q/%q", a.User, a.Password)
			}
			errs <- err
		}()
	}
	started.Wait()
	// Give every caller time to reach Get while the first read is held.
	// The assertion holds whatever the timing with shared reads; the pause
	// is what lets a cache without them read more than once.
	time.Sleep(100 * time.Millisecond)
	close(f.release)
	done.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := f.count(); n != 1 {
		t.Fatalf("%d concurrent Gets read the Secret %d times, want once", callers, n)
	}
}

// A Get that missed just as another Get's read finished uses the account
// that read kept, and reads nothing itself: the window the TTL test above
// still flaked on in CI (two sites probed in parallel after the TTL, the
// second finding the first's read already gone from the group).
func TestAMissAsAReadFinishesReadsNothingMore(t *testing.T) {
	f := newGatedFetch(func(int) string { return "s3cret" })
	cc, g := f.cache()
	close(f.release)
	cc.missHook = func() {
		cc.missHook = nil // once: between this Get's miss and its read, another Get reads and keeps the account
		if _, err := cc.Get(context.Background(), g); err != nil {
			t.Error(err)
		}
	}
	if a, err := cc.Get(context.Background(), g); err != nil || a.Password != "s3cret" {
		t.Fatalf("got %q, %v", a.Password, err)
	}
	if n := f.count(); n != 1 {
		t.Fatalf("the Secret was read %d times, want once", n)
	}
}

func TestAnInvalidateDuringARereadIsNotUndoneByIt(t *testing.T) {
	f := newGatedFetch(func(n int) string {
		if n == 1 {
			return "old"
		}
		return "new"
	})
	cc, g := f.cache()
	first := make(chan string)
	go func() {
		a, _ := cc.Get(context.Background(), g)
		first <- a.Password
	}()
	for f.count() != 1 {
		time.Sleep(time.Millisecond)
	}
	cc.Invalidate(g) // a site refused the account while "old" was being read
	close(f.release)
	if pw := <-first; pw != "old" {
		t.Fatalf("the overtaken read answered %q", pw)
	}
	if a, _ := cc.Get(context.Background(), g); a.Password != "new" {
		t.Fatalf("after the refusal the cache answered %q, want a fresh read", a.Password)
	}
}

// A Fetch that panics is an error for the Get that waited on it, not a
// crash (singleflight re-raises a DoChan panic where nothing can recover
// it); the next Get reads again.
func TestAPanickingSecretReadIsAnErrorAndTheNextReadsAgain(t *testing.T) {
	calls := 0
	c := &CredentialCache{Clock: clocktesting.NewFakeClock(time.Now()), Fetch: func(context.Context, *bloodravenv1alpha1.MysqlFailoverGroup) (Account, error) {
		calls++
		if calls == 1 {
			panic("boom")
		}
		return Account{User: "u", Password: "p"}, nil
	}}
	g := &bloodravenv1alpha1.MysqlFailoverGroup{}
	g.UID = "g1"
	if _, err := c.Get(context.Background(), g); err == nil || !strings.Contains(err.Error(), "panic") {
		t.Fatalf("first Get: %v, want the panic as an error", err)
	}
	if a, err := c.Get(context.Background(), g); err != nil || a.User != "u" || a.Password != "p" {
		t.Fatalf("second Get: %q %q %v", a.User, a.Password, err)
	}
}

// A kept account past its TTL leaves memory at the next read of any
// group: a deleted group's password (and client key) is not kept for the
// life of the process.
func TestAnExpiredAccountIsDroppedAtTheNextRead(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	c := &CredentialCache{Clock: clk, Fetch: Static(Account{User: "u", Password: "p"})}
	gone, live := &bloodravenv1alpha1.MysqlFailoverGroup{}, &bloodravenv1alpha1.MysqlFailoverGroup{}
	gone.UID, live.UID = "deleted-group", "live-group"
	if _, err := c.Get(context.Background(), gone); err != nil {
		t.Fatal(err)
	}
	clk.Step(DefaultCredentialTTL)
	if _, err := c.Get(context.Background(), live); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, kept := c.m[keyOf(gone)]; kept || len(c.m) != 1 {
		t.Fatalf("after a TTL the cache still holds %d accounts (the deleted group's: %v)", len(c.m), kept)
	}
}
