package operator

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/controllers"
	"github.com/shipstream/bloodraven/internal/mariadblocal"
	"github.com/shipstream/bloodraven/internal/readonly"
	"github.com/shipstream/bloodraven/internal/testenv"
	"github.com/shipstream/bloodraven/store/leasestore"
	mysqldriver "github.com/shipstream/bloodraven/topology/mysql"
)

// pair is one group's two real servers.
type pair struct {
	iad, pdx *mariadblocal.Server
}

// startPairs starts n pairs of MariaDB servers, pdx replicating from iad,
// a few at a time.
func startPairs(t *testing.T, n int) []pair {
	t.Helper()
	if err := mariadblocal.Available(); err != nil {
		t.Fatal(err) // CI installs it; a missing server is a failure, not a skip
	}
	ctx := context.Background()
	dir := t.TempDir()
	pairs := make([]pair, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i := range pairs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			p := &pairs[i]
			var err error
			if p.iad, err = mariadblocal.Start(ctx, fmt.Sprintf("%s/%d-iad", dir, i), "iad", testenv.FreePort(t), 1, "bloodraven", "s3cret"); err != nil {
				errs[i] = err
				return
			}
			t.Cleanup(p.iad.Kill)
			if p.pdx, err = mariadblocal.Start(ctx, fmt.Sprintf("%s/%d-pdx", dir, i), "pdx", testenv.FreePort(t), 2, "bloodraven", "s3cret"); err != nil {
				errs[i] = err
				return
			}
			t.Cleanup(p.pdx.Kill)
			errs[i] = p.pdx.ReplicateFrom(ctx, p.iad)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return pairs
}

// rootDSN is a sampler's DSN for a server: root over its socket.
func rootDSN(s *mariadblocal.Server) string {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "unix", s.Socket()
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = readonly.QueryBound, time.Second, time.Second
	return cfg.FormatDSN()
}

// startFleetOperator runs the operator's parts as the binary assembles
// them (operator.New: the SQL driver, the prober, concurrent workers, the
// production probe interval) under a manager confined to ns.
func startFleetOperator(t *testing.T, ns string, workers int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Cache:                  CacheOptions(ns),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	drv := mysqldriver.NewCached(mysqldriver.Static(mysqldriver.Account{User: "bloodraven", Password: "s3cret"}), clock.RealClock{})
	key, err := leasestore.LoadRecordKey(ctx, env.Client, ns, "bloodraven-lease-record-key", ns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(mgr, Config{Driver: drv, Clock: clock.RealClock{}, Metrics: prometheus.NewRegistry(), RecordKey: key, Workers: workers}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
		drv.Close()
	})
}

// waitGroups waits until every group satisfies ok.
func waitGroups(t *testing.T, ns string, names []string, timeout time.Duration, what string, ok func(*bloodravenv1alpha1.MysqlFailoverGroup) bool) map[string]*bloodravenv1alpha1.MysqlFailoverGroup {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out := map[string]*bloodravenv1alpha1.MysqlFailoverGroup{}
		behind := ""
		for _, n := range names {
			g := &bloodravenv1alpha1.MysqlFailoverGroup{}
			if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: n}, g); err != nil {
				t.Fatal(err)
			}
			if !ok(g) {
				behind = fmt.Sprintf("%s: %s gen %d transition %+v health %+v", n, g.Status.ActiveSite, g.Status.TopologyGeneration, g.Status.Transition, g.Status.Health)
			}
			out[n] = g
		}
		if behind == "" {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; e.g. %s", what, timeout, behind)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fleet is n groups, each with its own pair of real MariaDB servers, under
// one operator wired as the binary wires it.
type fleet struct {
	t      *testing.T
	ns     string
	names  []string
	pairs  []pair
	budget int32
}

func startFleet(t *testing.T, n int, budget int32) *fleet {
	t.Helper()
	f := &fleet{t: t, pairs: startPairs(t, n), ns: env.Namespace(t), budget: budget}
	for i, p := range f.pairs {
		f.names = append(f.names, fmt.Sprintf("group-%d", i))
		g := &bloodravenv1alpha1.MysqlFailoverGroup{
			ObjectMeta: metav1.ObjectMeta{Name: f.names[i], Namespace: f.ns},
			Spec: bloodravenv1alpha1.MysqlFailoverGroupSpec{FailureDetectionSeconds: budget, Sites: []bloodravenv1alpha1.Site{
				{Name: "iad", Host: "127.0.0.1", Port: int32(p.iad.Port)},
				{Name: "pdx", Host: "127.0.0.1", Port: int32(p.pdx.Port)},
			}},
		}
		if err := env.Client.Create(context.Background(), g); err != nil {
			t.Fatal(err)
		}
	}
	startFleetOperator(t, f.ns, 0)
	waitGroups(t, f.ns, f.names, 2*time.Minute, "bootstrap", func(g *bloodravenv1alpha1.MysqlFailoverGroup) bool {
		return g.Status.ActiveSite == "iad" && g.Status.TopologyGeneration == 1 && g.Status.Health.ReplicationRunning
	})
	return f
}

// loseIad pauses every iad server at once (SIGSTOP) and waits until every
// group is promoted; it returns the fault's time and each group's
// promotion time (status.topologyGenerationTime) after it.
func (f *fleet) loseIad() (time.Time, []time.Duration) {
	t := f.t
	t.Helper()
	lost := time.Now()
	for _, p := range f.pairs {
		if err := p.iad.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, p := range f.pairs {
			_ = p.iad.Resume()
		}
	})
	moved := waitGroups(t, f.ns, f.names, 3*time.Minute, "every group promoted", func(g *bloodravenv1alpha1.MysqlFailoverGroup) bool {
		return g.Status.ActiveSite == "pdx" && g.Status.TopologyGeneration >= 2 && g.Status.Transition == nil
	})
	var ds []time.Duration
	for _, g := range moved {
		if g.Status.TopologyGeneration != 2 {
			t.Errorf("%s: generation %d after the site loss, want exactly 2", g.Name, g.Status.TopologyGeneration)
		}
		ds = append(ds, g.Status.TopologyGenerationTime.Sub(lost))
	}
	slices.Sort(ds)
	return lost, ds
}

// A whole site (iad) is lost under 8 groups at once, each with its own pair
// of real MariaDB servers, every iad server paused (SIGSTOP: it accepts and
// answers nothing). With concurrent workers and the prober, every group is
// promoted exactly once (generation 1 → 2), no two sites of a group are
// ever seen writable while iad is away, and every old primary that returns
// (SIGCONT, still read_only=0) is fenced within one probe interval of its
// return, seen by @@read_only sampled every 100 ms on every server.
func TestASiteLostUnderEightGroupsPromotesEachOnceAndFencesEveryReturn(t *testing.T) {
	const n = 8
	fl := startFleet(t, n, 5)
	ns, names, pairs := fl.ns, fl.names, fl.pairs
	samplers := make([]*readonly.Sampler, n)
	for i, p := range pairs {
		samplers[i] = readonly.Start(t, map[string]string{"iad": rootDSN(p.iad), "pdx": rootDSN(p.pdx)})
	}
	lost, ds := fl.loseIad()
	t.Logf("8 groups, iad paused: promotions %.1f s (first) to %.1f s (last) after the fault (budget 5 s)", ds[0].Seconds(), ds[len(ds)-1].Seconds())
	for i, s := range samplers {
		if two := s.TwoWritable(lost, time.Time{}); len(two) > 0 {
			t.Errorf("group %d: two writable sites while iad was paused, first at %s", i, two[0].At.Sub(lost))
		}
	}

	back := time.Now()
	for _, p := range pairs {
		if err := p.iad.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	interval := controllers.DefaultProbeInterval // Config.ProbeInterval is left at its default
	deadline := time.Now().Add(interval + 10*time.Second)
	for i, s := range samplers {
		var lat time.Duration
		var ok bool
		for {
			if lat, ok = s.FenceLatency("iad", back); ok || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !ok {
			t.Fatalf("group %d: the returning old primary was not seen read-only within %s", i, interval+10*time.Second)
		}
		t.Logf("group %d: old primary fenced %s after it answered again", i, lat)
		if lat > interval {
			t.Errorf("group %d: the old primary stayed writable %s after its return, more than one probe interval (%s)", i, lat, interval)
		}
	}
	// It rejoins as a replica, and nothing moves again.
	final := waitGroups(t, ns, names, time.Minute, "old primaries rejoined", func(g *bloodravenv1alpha1.MysqlFailoverGroup) bool {
		return g.Status.Health.ReplicationRunning && g.Status.Health.Ready
	})
	for _, g := range final {
		if g.Status.ActiveSite != "pdx" || g.Status.TopologyGeneration != 2 {
			t.Errorf("%s moved again after the return: %s/%d", g.Name, g.Status.ActiveSite, g.Status.TopologyGeneration)
		}
		var evs corev1.EventList
		if err := env.Client.List(context.Background(), &evs, client.InNamespace(ns), client.MatchingFields{"involvedObject.name": g.Name}); err == nil {
			promoted := 0
			for _, e := range evs.Items {
				if e.Reason == "EmergencyFailover" {
					promoted++
				}
			}
			if promoted != 1 {
				t.Errorf("%s: %d EmergencyFailover events, want 1", g.Name, promoted)
			}
		}
	}
}

// TestSiteLossOfRealMariaDB is the site-loss bench's real row: as many
// pairs as this machine runs (BENCH_MARIADB_PAIRS, default 16), every iad
// server paused at once. It runs only in the full `make bench`.
func TestSiteLossOfRealMariaDB(t *testing.T) {
	if os.Getenv("BLOODRAVEN_BENCH") == "" || os.Getenv("BENCH_QUICK") != "" {
		t.Skip("the real site-loss row runs only in the full make bench")
	}
	n := 16
	if v, err := strconv.Atoi(os.Getenv("BENCH_MARIADB_PAIRS")); err == nil && v > 0 {
		n = v
	}
	const budget = 5
	fl := startFleet(t, n, budget)
	_, ds := fl.loseIad()
	row := fmt.Sprintf("%d\thung (SIGSTOP)\treal MariaDB\t%d\t%.1f\t%.1f\t%.1f\t%d\t%v\t",
		n, budget, ds[0].Seconds(), ds[len(ds)/2].Seconds(), ds[len(ds)-1].Seconds(), budget+10, ds[len(ds)-1] <= (budget+10)*time.Second)
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "groups\tfault\tdriver\tbudget s\tfirst s\tmedian s\tlast s\ttarget s\tmet\t")
	fmt.Fprintln(tw, row)
	_ = tw.Flush()
	fmt.Println("site loss, real MariaDB (each group its own pair of mariadbd; seconds from SIGSTOP of every iad server to each group's new generation):\n" + b.String())
	t.Log("\n" + b.String())
}
