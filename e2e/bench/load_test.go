package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"testing"
	"time"
)

// TestLoad runs every cell, the revocation and the heap figure against one
// control plane and one in-process operator, prints the table and writes
// the JSON report. It fails only when a figure could not be produced.
func TestLoad(t *testing.T) {
	if env == nil {
		t.Skip("the load generator runs only with BLOODRAVEN_BENCH=1 (make bench); it starts a control plane")
	}
	began := time.Now()
	p := paramsFromEnv()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := os.Getenv("BENCH_OUT")
	if out == "" {
		out = filepath.Join(t.TempDir(), "bench.json")
	}
	rep := &Report{
		Schema: ReportSchema, StartedAt: began.UTC(), Quick: p.Quick, GoVersion: runtime.Version(),
		NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		Rounds: p.Rounds, WarmupSeconds: p.Warmup.Seconds(), MeasureSeconds: p.Measure.Seconds(),
		ProductTokens: "product: one fresh ServiceAccount token per worker per cell (TokenRequest, audience bloodraven-deploy)",
		APIRequestsNote: "apiserver_request_total delta over the cell (warm-up included) / operations; " +
			"includes the in-process operator's own traffic (controllers; watches are not counted per event)",
	}

	s := newScene(t)
	clients := maxInt(p.Clients)
	step(t, "create %d groups", clients)
	must(t, s.addGroups(ctx, clients, p.Workers))
	floor, err := s.newFloorWorkers(ctx, clients)
	must(t, err)
	peer, err := s.newPeerWorkers(ctx, clients)
	must(t, err)

	step(t, "background for %s", p.Idle)
	bg0, err := scrape(ctx)
	must(t, err)
	time.Sleep(p.Idle)
	bg1, err := scrape(ctx)
	must(t, err)
	rep.ScrapesCounted = bg1.Scrapes > bg0.Scrapes
	rep.Background = Background{Seconds: p.Idle.Seconds(), Groups: len(s.groups) + 1,
		APIRequestsPerSecond: bg1.sub(bg0).Requests / p.Idle.Seconds()}

	unrelated := 0
	for _, dbs := range p.Databases {
		if dbs > unrelated {
			step(t, "create %d unrelated MysqlDatabases in %d namespaces", dbs-unrelated, p.Namespaces)
			t0 := time.Now()
			must(t, s.addUnrelatedDatabases(ctx, dbs-unrelated, p.Namespaces, p.Workers))
			t.Logf("created %d databases in %s", dbs-unrelated, time.Since(t0).Round(time.Millisecond))
			unrelated = dbs
		}
		for _, c := range p.Clients {
			rep.Cells = append(rep.Cells, s.renewalCells(ctx, t, rep, p, c, unrelated, floor, peer)...)
		}
	}
	fillRatios(rep.Cells)
	if p.RenewalsOnly {
		fmt.Println(rep.table())
		return
	}

	// The heap is measured before the revocation: 100 failovers leave the
	// operator busy (Events drain, degraded groups are re-probed), and what
	// it frees meanwhile would be counted against the tombstones.
	step(t, "heap for %d tombstones", p.Tombstones)
	if rep.Memory, err = s.measureTombstoneHeap(ctx, p.Tombstones, p.Workers, p.Settle); err != nil {
		rep.fail("memory: %v", err)
	}
	// The workers stay reachable through the heap figure.
	runtime.KeepAlive(floor)
	runtime.KeepAlive(peer)

	step(t, "revocation of %d leases", p.RevocationLeases)
	if rep.Revocation, err = s.measureRevocation(ctx, p.RevocationLeases, p.Workers); err != nil {
		rep.fail("revocation: %v", err)
	}

	rep.WallSeconds = time.Since(began).Seconds()
	table := rep.table()
	fmt.Println(table)
	t.Log("\n" + table)
	must(t, rep.write(out))
	t.Logf("report written to %s (%.0f s)", out, rep.WallSeconds)
	for _, f := range rep.Failures {
		t.Errorf("no figure: %s", f)
	}
}

// renewalCells measures every mode at c clients in p.Rounds interleaved
// rounds: each round runs one slice (p.Warmup + p.Measure) of every mode,
// in the order of p.Modes on even rounds and in reverse on odd ones, so a
// drift of the machine's speed weighs on every mode alike. A mode's cell
// aggregates its slices; each product or peer slice is also compared with
// the floor slice of its round (Cell.OpsRatioToFloorByRound).
func (s *scene) renewalCells(ctx context.Context, t *testing.T, rep *Report, p params, c, unrelated int, floor []*floorWorker, peer []*peerWorker) []Cell {
	t.Helper()
	opsOf := map[string][]op{}
	var product []*productWorker
	var floorMeta []*floorMetaWorker
	var err error
	for _, mode := range p.Modes {
		switch mode {
		case modeFloor:
			opsOf[mode] = opsFrom(floor[:c])
		case modeFloorMeta:
			floorMeta, err = s.floorMetaWorkers(ctx, c)
			must(t, err)
			opsOf[mode] = opsFrom(floorMeta)
		case modePeer:
			opsOf[mode] = opsFrom(peer[:c])
		case modeProduct:
			product, err = s.productWorkers(ctx, c, fmt.Sprintf("d%d-c%d", unrelated, c))
			must(t, err)
			opsOf[mode] = opsFrom(product)
		default:
			t.Fatalf("unknown mode %q", mode)
		}
	}
	ran := map[string][]slice{}
	for round := range p.Rounds {
		order := append([]string(nil), p.Modes...)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, mode := range order {
			step(t, "round %d/%d: %s × %d clients × %d databases", round+1, p.Rounds, mode, c, unrelated)
			stopProfile := profileAPIServer(ctx, fmt.Sprintf("cell-%s-%d-%d-r%d", mode, c, unrelated, round+1), p.Warmup+p.Measure)
			sl, err := runSlice(ctx, opsOf[mode], p.Warmup, p.Measure)
			stopProfile()
			if err != nil {
				rep.fail("cell %s × %d × %d, round %d: %v", mode, c, unrelated, round+1, err)
			}
			ran[mode] = append(ran[mode], sl)
			if cpu := sl.cpu.perOp(cpuSample{}, sl.run.total); cpu != nil {
				t.Logf("  %.0f ops/s, %d errors, cpu ms/op %.2f (%.2f, %.2f, %.2f)", sl.measured, sl.run.errors,
					cpu["total"], cpu["bench+operator"], cpu["kube-apiserver"], cpu["etcd"])
			}
		}
	}
	if floorMeta != nil {
		must(t, releaseFloorMeta(ctx, floorMeta))
	}
	if product != nil {
		must(t, s.releaseProduct(ctx, product))
	}
	var cells []Cell
	for _, mode := range p.Modes {
		cell := cellOf(ran[mode], p.Measure)
		cell.Mode, cell.Clients, cell.Databases = mode, c, unrelated
		if mode == modeProduct {
			// The API caches a successful review 15 s per token, and the
			// product's slices span the whole interleaved run.
			cell.TokenReviewsMin = ptrTo(c * int(math.Ceil(cell.SpanSeconds/15)))
		} else {
			cell.TokenReviews, cell.TokenReviewsPer1000 = nil, nil
		}
		if mode != modeFloor {
			cell.OpsRatioToFloorByRound = roundRatios(ran[mode], ran[modeFloor])
		}
		if cell.Ops == 0 {
			rep.fail("cell %s × %d × %d: no successful operation (%d errors, first: %s)",
				mode, c, unrelated, cell.Errors, cell.FirstErr)
		}
		if cell.Errors > 0 {
			t.Logf("cell %s × %d × %d: %d failed operations, first: %s", mode, c, unrelated, cell.Errors, cell.FirstErr)
		}
		cells = append(cells, cell)
	}
	return cells
}

// opsFrom is the closed-loop operation of each worker.
func opsFrom[W interface{ op(context.Context) error }](ws []W) []op {
	out := make([]op, len(ws))
	for i, w := range ws {
		out[i] = w.op
	}
	return out
}

// slice is one run of a mode's operations between two scrapes of the API
// server's counters and two samples of /proc.
type slice struct {
	run   run
	api   apiCounts
	cpu   cpuSample // CPU seconds used during the slice, by process
	start time.Time
	// measured is the ops/s of the measured window.
	measured float64
}

// runSlice runs ops for warmup+measure between two scrapes.
func runSlice(ctx context.Context, ops []op, warmup, measure time.Duration) (slice, error) {
	before, err := scrape(ctx)
	if err != nil {
		return slice{}, err
	}
	start := time.Now()
	cpu0 := sampleCPU()
	r := runOps(ctx, ops, warmup, measure)
	cpu1 := sampleCPU()
	after, err := scrape(ctx)
	if err != nil {
		return slice{}, err
	}
	return slice{run: r, api: after.sub(before), cpu: cpu1.minus(cpu0), start: start,
		measured: float64(len(r.latencies)) / measure.Seconds()}, nil
}

// cellOf aggregates the slices of one mode: operations, errors, API
// requests and CPU are summed, latencies merged, ops/s taken over every
// measured window.
func cellOf(slices []slice, measure time.Duration) Cell {
	var c Cell
	var lat []time.Duration
	var requests, reviews float64
	cpu := cpuSample{}
	var firstErr error
	for i, sl := range slices {
		lat = append(lat, sl.run.latencies...)
		c.TotalOps += sl.run.total
		c.Errors += sl.run.errors
		c.Seconds += sl.run.elapsed.Seconds()
		if firstErr == nil {
			firstErr = sl.run.firstErr
		}
		requests += sl.api.Requests
		reviews += sl.api.TokenReviews
		for k, v := range sl.cpu {
			cpu[k] += v
		}
		if i == len(slices)-1 {
			c.SpanSeconds = sl.start.Add(sl.run.elapsed).Sub(slices[0].start).Seconds()
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	c.Rounds = len(slices)
	c.Ops = len(lat)
	if len(slices) > 0 {
		c.OpsPerSecond = float64(len(lat)) / (measure.Seconds() * float64(len(slices)))
	}
	c.P50Ms, c.P99Ms, c.P999Ms = quantile(lat, 0.5), quantile(lat, 0.99), quantile(lat, 0.999)
	c.APIRequests = requests
	c.CPUMsPerOp = cpu.perOp(cpuSample{}, c.TotalOps)
	if firstErr != nil {
		c.FirstErr = firstErr.Error()
	}
	if c.TotalOps > 0 {
		c.APIRequestsPerOp = requests / float64(c.TotalOps)
		c.TokenReviews = ptrTo(reviews)
		c.TokenReviewsPer1000 = ptrTo(reviews / float64(c.TotalOps) * 1000)
	}
	return c
}

// roundRatios are, round by round, the slice's ops/s over the floor
// slice's of the same round; nil without a floor.
func roundRatios(mode, floor []slice) []float64 {
	if len(floor) != len(mode) {
		return nil
	}
	var out []float64
	for i := range mode {
		if floor[i].measured == 0 {
			return nil
		}
		out = append(out, math.Round(mode[i].measured/floor[i].measured*1000)/1000)
	}
	return out
}

// runCell runs ops once between two scrapes: a cell of one slice.
func runCell(ctx context.Context, ops []op, warmup, measure time.Duration) (Cell, error) {
	sl, err := runSlice(ctx, ops, warmup, measure)
	if err != nil {
		return Cell{}, err
	}
	return cellOf([]slice{sl}, measure), nil
}

func step(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("%s: "+format, append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// profileAPIServer writes a CPU profile of kube-apiserver over the next d
// to $BENCH_APISERVER_PROFILE/apiserver-<name>.prof when that is set
// (kube-apiserver serves /debug/pprof by default); wait returns when the
// profile is written.
func profileAPIServer(ctx context.Context, name string, d time.Duration) (wait func()) {
	dir := os.Getenv("BENCH_APISERVER_PROFILE")
	if dir == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		raw, err := env.Kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", fmt.Sprint(int(math.Ceil(d.Seconds())))).DoRaw(ctx)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "apiserver-"+name+".prof"), raw, 0o644)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "apiserver profile: %v\n", err)
		}
	}()
	return func() { <-done }
}
