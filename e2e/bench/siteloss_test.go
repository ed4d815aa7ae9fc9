package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/controllers"
	"github.com/shipstream/bloodraven/internal/operatortest"
	"github.com/shipstream/bloodraven/topology"
)

// Fault modes of a lost site.
const (
	// faultHung: every server of the site accepts and never answers (a
	// paused or black-holed MariaDB). Simulated: each call to it costs
	// topology.ProbeTimeout, what the SQL driver's probe bound lets a hung
	// server cost.
	faultHung = "hung"
	// faultRefused: connections are refused at once (a killed server).
	faultRefused = "refused"
)

// SiteLossRow is one site loss: every group's primary lost at once.
type SiteLossRow struct {
	Groups int    `json:"groups"`
	Fault  string `json:"fault"`
	Driver string `json:"driver"`
	// BudgetSeconds is the groups' failureDetectionSeconds.
	BudgetSeconds float64 `json:"budgetSeconds"`
	// First, Median and Last are seconds from the fault to each group's
	// promotion: status.topologyGenerationTime of its new generation (the
	// operator runs in this process, on this clock), collected by a watch.
	First  float64 `json:"firstSeconds"`
	Median float64 `json:"medianSeconds"`
	Last   float64 `json:"lastSeconds"`
	// Promoted counts the groups promoted within the run's deadline.
	Promoted int `json:"promoted"`
	// APIRequestsPerFailover is the kube-apiserver's request count from
	// the fault to the last promotion, every client included, per group.
	APIRequestsPerFailover float64 `json:"apiRequestsPerFailover"`
	// APIRequestsByKind breaks it down by verb and resource.
	APIRequestsByKind string `json:"apiRequestsByKind"`
	// Target is the goal in seconds after the fault.
	Target float64 `json:"targetSeconds"`
	// RoutineRequestsPerGroupSecond is the kube-apiserver's request rate
	// (every client) per group while the fleet is quiet (every group probed
	// every 10 s), measured before the fault.
	RoutineRequestsPerGroupSecond float64 `json:"routineRequestsPerGroupSecond"`
	// HeapMiB is this process's live heap (the operator, its caches, the
	// bench) after a GC, with the fleet quiet: N groups and 2N databases.
	HeapMiB float64 `json:"heapMiB"`
	// RenewalRatio is one client's renewals per second over HTTPS divided
	// by the floor's (a raw client's GET database, GET group, PUT Lease),
	// both measured with the fleet quiet and reconciled (every group
	// probed every 10 s), one cell after the other: the median of three
	// such pairs.
	RenewalRatio float64 `json:"renewalRatio"`
	// WriteFloor is the floor of the API server's part: seconds for a raw
	// client with the controller's workers to make, for each of N groups
	// the operator does not watch, the requests no safe failover can do
	// without (GET the group, write the transition, write the move),
	// measured with the fleet quiet. Budget + detection + WriteFloor is
	// about the earliest the last of N promotions can land here.
	WriteFloor float64 `json:"writeFloorSeconds"`
}

// writeFloor measures WriteFloor for n groups of a namespace of their own,
// created on first use (and grown with the fleet).
func (s *siteLoss) writeFloor(ctx context.Context, n, workers int) (float64, error) {
	if s.floorNS == "" {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-floor-"}}
		if err := env.Client.Create(ctx, ns); err != nil {
			return 0, err
		}
		s.floorNS = ns.Name
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 5000, 10000
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		return 0, err
	}
	if err := parallel(n-s.floorGroups, 16, func(_, i int) error {
		return c.Create(ctx, &bloodravenv1alpha1.MysqlFailoverGroup{
			ObjectMeta: metav1.ObjectMeta{Name: siteLossGroup(s.floorGroups + i), Namespace: s.floorNS},
			Spec:       bloodravenv1alpha1.MysqlFailoverGroupSpec{Sites: []bloodravenv1alpha1.Site{{Name: "iad"}, {Name: "pdx"}}, FailureDetectionSeconds: 5},
		})
	}); err != nil {
		return 0, err
	}
	s.floorGroups = n
	if workers <= 0 {
		workers = controllers.DefaultWorkers
	}
	start := time.Now()
	err = parallel(n, workers, func(_, i int) error {
		g := &bloodravenv1alpha1.MysqlFailoverGroup{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: s.floorNS, Name: siteLossGroup(i)}, g); err != nil {
			return err
		}
		gen := g.Status.TopologyGeneration + 1
		g.Status.Transition = &bloodravenv1alpha1.TopologyTransition{Operation: bloodravenv1alpha1.OperationEmergencyFailover, TargetSite: "pdx", Generation: gen,
			StartedAt: metav1.Now()}
		if err := c.Status().Update(ctx, g); err != nil {
			return err
		}
		g.Status.Transition, g.Status.ActiveSite, g.Status.TopologyGeneration = nil, "pdx", gen
		return c.Status().Update(ctx, g)
	})
	return time.Since(start).Seconds(), err
}

// renewalRatio runs the floor and then the product with one client, a
// cell each, three times over, and returns the median of the three ratios
// of the product's ops/s to the floor's: one pair of short cells swings by
// a third on this machine.
func (s *scene) renewalRatio(ctx context.Context, floor *floorWorker, cell string, warmup, measure time.Duration) (float64, error) {
	var ratios []float64
	for range 3 {
		r, err := s.renewalRatioOnce(ctx, floor, cell, warmup, measure)
		if err != nil {
			return 0, err
		}
		ratios = append(ratios, r)
	}
	sort.Float64s(ratios)
	return ratios[1], nil
}

func (s *scene) renewalRatioOnce(ctx context.Context, floor *floorWorker, cell string, warmup, measure time.Duration) (float64, error) {
	fc, err := runCell(ctx, []op{floor.op}, warmup, measure)
	if err != nil {
		return 0, err
	}
	product, err := s.productWorkers(ctx, 1, cell)
	if err != nil {
		return 0, err
	}
	pc, err := runCell(ctx, []op{product[0].op}, warmup, measure)
	if err != nil {
		return 0, err
	}
	if err := s.releaseProduct(ctx, product); err != nil {
		return 0, err
	}
	if fc.OpsPerSecond == 0 || pc.Errors > 0 {
		return 0, fmt.Errorf("renewal cells: floor %.0f ops/s, product %d errors (first: %s)", fc.OpsPerSecond, pc.Errors, pc.FirstErr)
	}
	return pc.OpsPerSecond / fc.OpsPerSecond, nil
}

// quiet measures the fleet's routine API cost and the heap.
func (s *siteLoss) quiet(ctx context.Context, d time.Duration) (perGroupSecond, heapMiB float64, err error) {
	time.Sleep(5 * time.Second) // the bootstrap's last writes settle
	c0, err := scrape(ctx)
	if err != nil {
		return 0, 0, err
	}
	time.Sleep(d)
	c1, err := scrape(ctx)
	if err != nil {
		return 0, 0, err
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return c1.sub(c0).Requests / d.Seconds() / float64(len(s.groups)), float64(ms.HeapAlloc) / (1 << 20), nil
}

// siteLossTarget is the goal for n groups: budget + 15 s up to
// 1,000 groups, budget + 60 s beyond.
func siteLossTarget(n int, budget float64) float64 {
	if n <= 1000 {
		return budget + 15
	}
	return budget + 60
}

// TestSiteLoss loses the primary site of N groups at once, hung and then
// refused, for each N, against one control plane and one in-process
// operator (its production defaults: probe interval 10 s, workers, prober),
// and prints the table. It fails only when a figure could not be produced.
func TestSiteLoss(t *testing.T) {
	if env == nil {
		t.Skip("the site-loss bench runs only with BLOODRAVEN_BENCH=1 (make bench); it starts a control plane")
	}
	sizes := []int{10, 100, 1000, 5000}
	if os.Getenv("BENCH_QUICK") != "" {
		sizes = []int{10, 100, 1000}
	}
	if smoke() {
		sizes = []int{10}
	}
	if v := os.Getenv("BENCH_SITELOSS_SIZES"); v != "" { // e.g. 10,100
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				t.Fatalf("BENCH_SITELOSS_SIZES: %q", v)
			}
			sizes = append(sizes, n)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const budget = 5
	workers := 0 // the binary's default
	if v := os.Getenv("BENCH_GROUP_WORKERS"); v != "" {
		if workers, _ = strconv.Atoi(v); workers <= 0 {
			t.Fatalf("BENCH_GROUP_WORKERS: %q", v)
		}
	}
	o := operatortest.Start(t, env, operatortest.Options{Quiet: true, ProbeInterval: 10 * time.Second, FairShare: benchFairShare,
		FailureDetectionSeconds: budget, Workers: workers})
	sl := &siteLoss{o: o, active: map[string]string{}}
	// One group of the renewal cells (bench-000, with its database), and
	// the floor's Lease, beside the fleet.
	sc := sceneFor(t, o)
	must(t, sc.addGroups(ctx, 1, 1))
	floor, err := sc.newFloorWorkers(ctx, 1)
	must(t, err)
	warmup, measure := time.Second, 5*time.Second
	if os.Getenv("BENCH_QUICK") != "" {
		warmup, measure = 500*time.Millisecond, 2500*time.Millisecond
	}
	if smoke() {
		warmup, measure = 200*time.Millisecond, 500*time.Millisecond
	}
	var rows []SiteLossRow
	for _, n := range sizes {
		step(t, "site loss: %d groups", n)
		if err := sl.grow(ctx, n, budget); err != nil {
			t.Fatalf("create %d groups: %v", n, err)
		}
		quietFor := 20 * time.Second
		if os.Getenv("BENCH_QUICK") != "" {
			quietFor = 5 * time.Second
		}
		if smoke() {
			quietFor = time.Second
		}
		routine, heap, err := sl.quiet(ctx, quietFor)
		if err != nil {
			t.Fatalf("quiet fleet of %d: %v", n, err)
		}
		ratio, err := sc.renewalRatio(ctx, floor[0], fmt.Sprintf("fleet%d", n), warmup, measure)
		if err != nil {
			t.Fatalf("renewals beside a fleet of %d: %v", n, err)
		}
		writeFloor, err := sl.writeFloor(ctx, n, workers)
		if err != nil {
			t.Fatalf("write floor of %d: %v", n, err)
		}
		for _, fault := range []string{faultHung, faultRefused} {
			row, err := sl.lose(ctx, fault, 2*time.Duration(siteLossTarget(n, budget))*time.Second+time.Minute)
			if err != nil {
				t.Errorf("%d groups, %s: %v", n, fault, err)
				continue
			}
			row.BudgetSeconds, row.Target = budget, siteLossTarget(n, budget)
			row.RoutineRequestsPerGroupSecond, row.HeapMiB, row.RenewalRatio = routine, heap, ratio
			row.WriteFloor = writeFloor
			rows = append(rows, row)
			t.Logf("%d groups %s: first %.1f s, median %.1f s, last %.1f s; API requests per failover: %s", n, fault, row.First, row.Median, row.Last, row.APIRequestsByKind)
			if err := sl.recover(ctx, 3*time.Minute); err != nil {
				t.Fatalf("recover after %s: %v", fault, err)
			}
		}
	}
	table := siteLossTable(rows)
	fmt.Println(table)
	t.Log("\n" + table)
}

// siteLoss is the operator and its fleet of groups.
type siteLoss struct {
	o      *operatortest.Operator
	groups []*bloodravenv1alpha1.MysqlFailoverGroup
	// active is each group's active site, by name.
	active map[string]string
	// floorNS holds floorGroups groups nobody reconciles (writeFloor).
	floorNS     string
	floorGroups int
}

func siteLossGroup(i int) string { return fmt.Sprintf("fleet-%05d", i) }

// grow creates groups until there are n, seeds them (iad primary), gives
// each two MysqlDatabases and waits for their bootstrap.
func (s *siteLoss) grow(ctx context.Context, n int, budget int32) error {
	from := len(s.groups)
	fresh := make([]*bloodravenv1alpha1.MysqlFailoverGroup, n-from)
	err := parallel(n-from, 16, func(_, i int) error {
		g := &bloodravenv1alpha1.MysqlFailoverGroup{
			ObjectMeta: metav1.ObjectMeta{Name: siteLossGroup(from + i), Namespace: s.o.Namespace},
			Spec: bloodravenv1alpha1.MysqlFailoverGroupSpec{Sites: []bloodravenv1alpha1.Site{{Name: "iad"}, {Name: "pdx"}},
				FailureDetectionSeconds: budget},
		}
		s.o.Driver.Seed(g, "iad")
		if err := env.Client.Create(ctx, g); err != nil {
			return err
		}
		fresh[i] = g
		return nil
	})
	if err != nil {
		return err
	}
	s.groups = append(s.groups, fresh...)
	// Two databases per group (10,000 at 5,000 groups): what the cache and
	// the database controller hold in a real fleet.
	err = parallel(2*(n-from), 16, func(_, k int) error {
		g := fresh[k/2]
		return env.Client.Create(ctx, &bloodravenv1alpha1.MysqlDatabase{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-db%d", g.Name, k%2), Namespace: s.o.Namespace},
			Spec: bloodravenv1alpha1.MysqlDatabaseSpec{GroupRef: bloodravenv1alpha1.GroupReference{Name: g.Name}, DatabaseName: "app",
				DeploymentClients: []bloodravenv1alpha1.DeploymentClient{{Namespace: s.o.ClientNamespace, ServiceAccount: operatortest.ServiceAccount}}},
		})
	})
	if err != nil {
		return err
	}
	if err := s.waitAll(ctx, 5*time.Minute, func(g *bloodravenv1alpha1.MysqlFailoverGroup) bool {
		return g.Status.TopologyGeneration >= 1 && g.Status.Transition == nil
	}); err != nil {
		return err
	}
	// The database controller's first reconciles are over too: the quiet
	// window and the fault meet a fleet at rest, not its creation.
	return s.waitDatabases(ctx, 2*n, 10*time.Minute)
}

// waitDatabases waits until want databases of the fleet say GroupFound.
func (s *siteLoss) waitDatabases(ctx context.Context, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var list bloodravenv1alpha1.MysqlDatabaseList
		if err := env.Client.List(ctx, &list, client.InNamespace(s.o.Namespace)); err != nil {
			return err
		}
		found := 0
		for _, db := range list.Items {
			if strings.HasPrefix(db.Name, "fleet-") && meta.IsStatusConditionTrue(db.Status.Conditions, controllers.DatabaseGroupFound) {
				found++
			}
		}
		if found >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d databases say GroupFound after %s", found, want, timeout)
		}
		time.Sleep(time.Second)
	}
}

// waitAll waits until every fleet group satisfies ok, and records their
// active sites.
func (s *siteLoss) waitAll(ctx context.Context, timeout time.Duration, ok func(*bloodravenv1alpha1.MysqlFailoverGroup) bool) error {
	deadline := time.Now().Add(timeout)
	for {
		var list bloodravenv1alpha1.MysqlFailoverGroupList
		if err := env.Client.List(ctx, &list, client.InNamespace(s.o.Namespace)); err != nil {
			return err
		}
		byName := map[string]*bloodravenv1alpha1.MysqlFailoverGroup{}
		for i := range list.Items {
			byName[list.Items[i].Name] = &list.Items[i]
		}
		behind, example := 0, ""
		for i, g := range s.groups {
			cur := byName[g.Name]
			if cur == nil || !ok(cur) {
				if behind++; example == "" && cur != nil {
					example = fmt.Sprintf("%s: gen %d active %s health %+v", cur.Name, cur.Status.TopologyGeneration, cur.Status.ActiveSite, cur.Status.Health)
				}
				continue
			}
			s.groups[i] = cur
			s.active[cur.Name] = cur.Status.ActiveSite
		}
		if behind == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d groups not ready after %s (%s)", behind, len(s.groups), timeout, example)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// lose takes every group's active site away at once (hung or refused) and
// times each group's promotion, seen by a watch, until all are promoted or
// timeout passes.
func (s *siteLoss) lose(ctx context.Context, fault string, timeout time.Duration) (SiteLossRow, error) {
	row := SiteLossRow{Groups: len(s.groups), Fault: fault, Driver: "simulated"}
	before := map[string]int64{}
	for _, g := range s.groups {
		before[g.Name] = g.Status.TopologyGeneration
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 5000, 10000
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		return row, err
	}
	w, err := wc.Watch(ctx, &bloodravenv1alpha1.MysqlFailoverGroupList{}, client.InNamespace(s.o.Namespace))
	if err != nil {
		return row, err
	}
	defer func() { w.Stop() }()
	c0, err := scrape(ctx)
	if err != nil {
		return row, err
	}
	fault0 := time.Now()
	if dir := os.Getenv("BENCH_APISERVER_PROFILE"); dir != "" {
		// A CPU profile of the API server over the failover's first 40 s
		// (kube-apiserver serves /debug/pprof by default): where its time
		// goes when a site is lost.
		go func() {
			raw, err := env.Kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "40").DoRaw(ctx)
			if err == nil {
				err = os.WriteFile(fmt.Sprintf("%s/apiserver-%d-%s.prof", dir, len(s.groups), fault), raw, 0o644)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "apiserver profile: %v\n", err)
			}
		}()
	}
	for _, g := range s.groups {
		if fault == faultHung {
			s.o.Driver.Hang(g, s.active[g.Name])
		} else {
			s.o.Driver.Kill(g, s.active[g.Name])
		}
	}
	promoted := map[string]time.Duration{}
	deadline := time.After(timeout)
	for len(promoted) < len(s.groups) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok { // the API server ended the watch: watch again
				if w, err = wc.Watch(ctx, &bloodravenv1alpha1.MysqlFailoverGroupList{}, client.InNamespace(s.o.Namespace)); err != nil {
					return row, fmt.Errorf("re-watch after %d promotions: %w", len(promoted), err)
				}
				continue
			}
			if ev.Type != watch.Modified && ev.Type != watch.Added {
				continue
			}
			g, ok := ev.Object.(*bloodravenv1alpha1.MysqlFailoverGroup)
			if !ok {
				continue
			}
			b, ours := before[g.Name]
			if _, seen := promoted[g.Name]; ours && !seen && g.Status.TopologyGeneration > b {
				// When the move was written (the operator's clock, this
				// process's): what status shows, whenever the watch
				// delivers it under load.
				at := time.Since(fault0)
				if mt := g.Status.TopologyGenerationTime; mt != nil {
					at = mt.Sub(fault0)
				}
				promoted[g.Name] = at
			}
		case <-deadline:
			row.Promoted = len(promoted)
			return row, fmt.Errorf("%d of %d groups promoted within %s", len(promoted), len(s.groups), timeout)
		}
	}
	c1, err := scrape(ctx)
	if err != nil {
		return row, err
	}
	ds := make([]time.Duration, 0, len(promoted))
	for _, d := range promoted {
		ds = append(ds, d)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	row.Promoted = len(ds)
	row.First, row.Median, row.Last = ds[0].Seconds(), ds[len(ds)/2].Seconds(), ds[len(ds)-1].Seconds()
	d := c1.sub(c0)
	row.APIRequestsPerFailover = d.Requests / float64(len(ds))
	row.APIRequestsByKind = d.kinds(float64(len(ds)))
	return row, nil
}

// recover revives every lost site and waits until every group is healthy
// again: its new primary writable, the returned site fenced and
// replicating.
func (s *siteLoss) recover(ctx context.Context, timeout time.Duration) error {
	for _, g := range s.groups {
		for _, site := range g.Spec.Sites {
			s.o.Driver.Revive(g, site.Name)
		}
	}
	return s.waitAll(ctx, timeout, func(g *bloodravenv1alpha1.MysqlFailoverGroup) bool {
		return g.Status.Transition == nil && g.Status.Health.Ready && g.Status.Health.DegradedReason == "" && g.Status.Health.ReplicationRunning &&
			s.replicaOK(g)
	})
}

// replicaOK: every site but the active one replicates and is read-only.
func (s *siteLoss) replicaOK(g *bloodravenv1alpha1.MysqlFailoverGroup) bool {
	for _, site := range g.Spec.Sites {
		if site.Name != g.Status.ActiveSite && s.o.Driver.Writable(g, site.Name) {
			return false
		}
	}
	return true
}

func siteLossTable(rows []SiteLossRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "site loss: every group's primary lost at the same instant; seconds from the fault to each group's new topologyGeneration (status.topologyGenerationTime)\n")
	fmt.Fprintf(&b, "hung = accepts and never answers (simulated: every call to it costs %s, the probe bound); refused = connections refused at once\n", topology.ProbeTimeout)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "groups\tfault\tdriver\tbudget s\tfirst s\tmedian s\tlast s\ttarget s\tmet\twrite floor s\tapi req/failover\tquiet api req/s per group\theap MiB\trenewals ÷ floor\t")
	for _, r := range rows {
		met := "yes"
		if r.Last > r.Target {
			met = fmt.Sprintf("no (+%.1f s)", r.Last-r.Target)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.0f\t%.1f\t%.1f\t%.1f\t%.0f\t%s\t%.1f\t%.1f\t%.3f\t%.0f\t%.2f\t\n",
			r.Groups, r.Fault, r.Driver, r.BudgetSeconds, r.First, r.Median, r.Last, r.Target, met, r.WriteFloor, r.APIRequestsPerFailover,
			r.RoutineRequestsPerGroupSecond, r.HeapMiB, r.RenewalRatio)
	}
	_ = tw.Flush()
	return b.String()
}
