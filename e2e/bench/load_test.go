package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
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
		WarmupSeconds: p.Warmup.Seconds(), MeasureSeconds: p.Measure.Seconds(),
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
			for _, mode := range p.Modes {
				step(t, "cell %s × %d clients × %d databases", mode, c, unrelated)
				var ops []op
				var product []*productWorker
				var floorMeta []*floorMetaWorker
				switch mode {
				case modeFloor:
					for _, w := range floor[:c] {
						ops = append(ops, w.op)
					}
				case modeFloorMeta:
					floorMeta, err = s.floorMetaWorkers(ctx, c)
					must(t, err)
					for _, w := range floorMeta {
						ops = append(ops, w.op)
					}
				case modePeer:
					for _, w := range peer[:c] {
						ops = append(ops, w.op)
					}
				case modeProduct:
					product, err = s.productWorkers(ctx, c, fmt.Sprintf("d%d-c%d", unrelated, c))
					must(t, err)
					for _, w := range product {
						ops = append(ops, w.op)
					}
				}
				stopProfile := profileAPIServer(ctx, fmt.Sprintf("cell-%s-%d-%d", mode, c, unrelated), p.Warmup+p.Measure)
				cell, err := runCell(ctx, ops, p.Warmup, p.Measure)
				stopProfile()
				cell.Mode, cell.Clients, cell.Databases = mode, c, unrelated
				if floorMeta != nil {
					must(t, releaseFloorMeta(ctx, floorMeta))
				}
				if mode == modeProduct {
					must(t, s.releaseProduct(ctx, product))
					// The API caches a successful review 15 s per token.
					cell.TokenReviewsMin = ptrTo(c * int(math.Ceil(cell.Seconds/15)))
				} else {
					cell.TokenReviews, cell.TokenReviewsPer1000 = nil, nil
				}
				switch {
				case err != nil:
					rep.fail("cell %s × %d × %d: %v", mode, c, unrelated, err)
				case cell.Ops == 0:
					rep.fail("cell %s × %d × %d: no successful operation (%d errors, first: %s)",
						mode, c, unrelated, cell.Errors, cell.FirstErr)
				}
				if cell.Errors > 0 {
					t.Logf("cell %s × %d × %d: %d failed operations, first: %s", mode, c, unrelated, cell.Errors, cell.FirstErr)
				}
				rep.Cells = append(rep.Cells, cell)
			}
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

// runCell runs ops between two scrapes of the API server's counters.
func runCell(ctx context.Context, ops []op, warmup, measure time.Duration) (Cell, error) {
	before, err := scrape(ctx)
	if err != nil {
		return Cell{}, err
	}
	cpu0 := sampleCPU()
	r := runOps(ctx, ops, warmup, measure)
	cpu1 := sampleCPU()
	after, err := scrape(ctx)
	if err != nil {
		return Cell{}, err
	}
	d := after.sub(before)
	c := Cell{
		Ops: len(r.latencies), TotalOps: r.total, Errors: r.errors, Seconds: r.elapsed.Seconds(),
		OpsPerSecond: float64(len(r.latencies)) / measure.Seconds(),
		P50Ms:        quantile(r.latencies, 0.5), P99Ms: quantile(r.latencies, 0.99), P999Ms: quantile(r.latencies, 0.999),
		APIRequests: d.Requests, CPUMsPerOp: cpu1.perOp(cpu0, r.total),
	}
	if r.firstErr != nil {
		c.FirstErr = r.firstErr.Error()
	}
	if r.total > 0 {
		c.APIRequestsPerOp = d.Requests / float64(r.total)
		c.TokenReviews = ptrTo(d.TokenReviews)
		c.TokenReviewsPer1000 = ptrTo(d.TokenReviews / float64(r.total) * 1000)
	}
	return c, nil
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
