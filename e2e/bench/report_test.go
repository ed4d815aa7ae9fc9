package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// ReportSchema names the JSON layout below; change it with the layout.
const ReportSchema = "bloodraven-bench/v2"

// Report is the JSON written to BENCH_OUT.
type Report struct {
	Schema     string    `json:"schema"`
	StartedAt  time.Time `json:"startedAt"`
	Quick      bool      `json:"quick"`
	GoVersion  string    `json:"goVersion"`
	NumCPU     int       `json:"numCPU"`
	GOMAXPROCS int       `json:"gomaxprocs"`
	// Rounds of interleaved slices make a renewal cell; WarmupSeconds and
	// MeasureSeconds are the two parts of every slice.
	Rounds         int     `json:"rounds"`
	WarmupSeconds  float64 `json:"warmupSeconds"`
	MeasureSeconds float64 `json:"measureSeconds"`
	// ProductTokens says how the product cells authenticate.
	ProductTokens string `json:"productTokens"`
	// APIRequestsNote says what apiCounts include.
	APIRequestsNote string `json:"apiRequestsNote"`
	// ScrapesCounted tells whether the API server counted the bench's own
	// /metrics requests in apiserver_request_total (they are left out of
	// every figure either way).
	ScrapesCounted bool `json:"scrapesCounted"`
	// Background is the API server's request rate with no load: the
	// operator's controllers for BackgroundGroups groups.
	Background Background `json:"background"`
	Cells      []Cell     `json:"cells"`
	Revocation Revocation `json:"revocation"`
	Memory     Memory     `json:"memory"`
	// Failures name the figures that could not be produced; the test
	// fails when there is any.
	Failures []string `json:"failures,omitempty"`
	// WallSeconds is the whole test, control-plane start excluded (it runs
	// in TestMain).
	WallSeconds float64 `json:"wallSeconds"`
}

// Background is the idle request rate.
type Background struct {
	Seconds              float64 `json:"seconds"`
	Groups               int     `json:"groups"`
	APIRequestsPerSecond float64 `json:"apiRequestsPerSecond"`
}

// Cell is one mode at one concurrency and one database count.
type Cell struct {
	Mode    string `json:"mode"`
	Clients int    `json:"clients"`
	// Databases is the number of unrelated MysqlDatabases in the cluster.
	Databases int `json:"databases"`
	// Ops are the successful operations started in the measured window;
	// TotalOps also those of the warm-up.
	Ops      int    `json:"ops"`
	TotalOps int    `json:"totalOps"`
	Errors   int    `json:"errors"`
	FirstErr string `json:"firstError,omitempty"`
	// Rounds is the number of slices the cell aggregates; Seconds their
	// time, SpanSeconds from the first one's start to the last one's end
	// (the other modes' slices run in between).
	Rounds      int     `json:"rounds"`
	Seconds     float64 `json:"seconds"`
	SpanSeconds float64 `json:"spanSeconds"`
	// OpsPerSecond is Ops over the measured windows.
	OpsPerSecond float64 `json:"opsPerSecond"`
	P50Ms        float64 `json:"p50Ms"`
	P99Ms        float64 `json:"p99Ms"`
	P999Ms       float64 `json:"p999Ms"`
	// APIRequests is the apiserver_request_total delta over the whole cell
	// (warm-up included, the operator's background included);
	// APIRequestsPerOp divides it by TotalOps.
	APIRequests      float64 `json:"apiRequests"`
	APIRequestsPerOp float64 `json:"apiRequestsPerOp"`
	// TokenReviews (product only) is the TokenReview create delta;
	// TokenReviewsPer1000 per 1,000 deployment API requests (TotalOps);
	// TokenReviewsMin what a 15 s review cache allows at best: tokens ×
	// ceil(Seconds / 15).
	TokenReviews        *float64 `json:"tokenReviews,omitempty"`
	TokenReviewsPer1000 *float64 `json:"tokenReviewsPer1000,omitempty"`
	TokenReviewsMin     *int     `json:"tokenReviewsMin,omitempty"`
	// OpsRatioToFloor and P50RatioToFloor (product and peer) compare with
	// the floor cell of the same clients and databases.
	OpsRatioToFloor *float64 `json:"opsRatioToFloor,omitempty"`
	P50RatioToFloor *float64 `json:"p50RatioToFloor,omitempty"`
	// OpsRatioToFloorByRound compares each slice with the floor slice of
	// its round: the spread says how far one pair of slices can be trusted.
	OpsRatioToFloorByRound []float64 `json:"opsRatioToFloorByRound,omitempty"`
	// CPUMsPerOp is the CPU time (user + system, from /proc) per operation
	// (TotalOps) over the whole cell, by process: "bench+operator" (the
	// test process: load generator and in-process operator), each child
	// (kube-apiserver, etcd) and their "total". Absent without /proc.
	CPUMsPerOp map[string]float64 `json:"cpuMsPerOp,omitempty"`
}

// Stats are quantiles of a set of durations, in milliseconds.
type Stats struct {
	N     int     `json:"n"`
	MinMs float64 `json:"minMs"`
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
	MaxMs float64 `json:"maxMs"`
}

func statsOf(ds []time.Duration) Stats {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return Stats{}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return Stats{N: len(s), MinMs: ms(s[0]), P50Ms: quantileSigned(s, 0.5), P99Ms: quantileSigned(s, 0.99), MaxMs: ms(s[len(s)-1])}
}

// quantileSigned is quantile for durations that may be negative.
func quantileSigned(sorted []time.Duration, q float64) float64 {
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	k = max(0, min(k, len(sorted)-1))
	return float64(sorted[k].Microseconds()) / 1000
}

// Revocation is the fence figure.
type Revocation struct {
	Leases int `json:"leases"`
	// FailoverSeconds is from the kill of every primary to the last group's
	// new generation observed.
	FailoverSeconds float64 `json:"failoverSeconds"`
	// PollIntervalMs is the pause between a lease's renewals, from the
	// moment its group's transition (or new generation) is observed.
	PollIntervalMs float64 `json:"pollIntervalMs"`
	// Refused is, per lease, from the first observation of its group's new
	// generation (a watch) to the arrival of the first 409 revoked; Tombstone
	// to the first observation of its tombstone (another watch). Negative
	// values: the refusal or tombstone was seen before the watch delivered
	// the generation.
	Refused   Stats `json:"refused"`
	Tombstone Stats `json:"tombstone"`
	// Answers counts the statuses the pollers got.
	Answers map[string]int `json:"answers"`
}

// Memory is the heap figure.
type Memory struct {
	// Scope: the whole test process, bench and in-process operator
	// (its informer caches) together.
	Scope           string  `json:"scope"`
	Tombstones      int     `json:"tombstones"`
	SettleSeconds   float64 `json:"settleSeconds"`
	HeapBeforeBytes uint64  `json:"heapBeforeBytes"`
	HeapAfterBytes  uint64  `json:"heapAfterBytes"`
	DeltaMiB        float64 `json:"deltaMiB"`
	MiBPer10000     float64 `json:"mibPer10000"`
}

// fillRatios compares every product and peer cell with its floor.
func fillRatios(cells []Cell) {
	floor := map[[2]int]Cell{}
	for _, c := range cells {
		if c.Mode == modeFloor {
			floor[[2]int{c.Clients, c.Databases}] = c
		}
	}
	for i := range cells {
		c := &cells[i]
		f, ok := floor[[2]int{c.Clients, c.Databases}]
		if c.Mode == modeFloor || !ok || f.OpsPerSecond == 0 || f.P50Ms == 0 {
			continue
		}
		c.OpsRatioToFloor = ptrTo(c.OpsPerSecond / f.OpsPerSecond)
		c.P50RatioToFloor = ptrTo(c.P50Ms / f.P50Ms)
	}
}

func (r *Report) fail(format string, args ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

func ptrTo[T any](v T) *T { return &v }

// table is the report as aligned text.
func (r *Report) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "bloodraven load (quick=%v): renewal cells of %d interleaved rounds of %.1f s warm-up + %.1f s measured per mode; %s\n",
		r.Quick, r.Rounds, r.WarmupSeconds, r.MeasureSeconds, r.ProductTokens)
	fmt.Fprintf(&b, "API requests per op: %s\n", r.APIRequestsNote)
	fmt.Fprintf(&b, "background with no load: %.1f API requests/s (%d groups, %.1f s)\n\n",
		r.Background.APIRequestsPerSecond, r.Background.Groups, r.Background.Seconds)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tclients\tdatabases\tops/s\tp50 ms\tp99 ms\tp99.9 ms\tapi req/op\ttokenreviews/1000\treviews (min)\tops/s ÷ floor\tby round (min–max)\tp50 ÷ floor\terrors\tcpu ms/op (bench+op, apiserver, etcd)\t")
	for _, c := range r.Cells {
		tr, trMin, ro, rr, rp := "-", "-", "-", "-", "-"
		if c.TokenReviewsPer1000 != nil {
			tr = fmt.Sprintf("%.2f", *c.TokenReviewsPer1000)
			trMin = fmt.Sprintf("%.0f (%d)", *c.TokenReviews, *c.TokenReviewsMin)
		}
		if c.OpsRatioToFloor != nil {
			ro, rp = fmt.Sprintf("%.2f", *c.OpsRatioToFloor), fmt.Sprintf("%.2f", *c.P50RatioToFloor)
		}
		if len(c.OpsRatioToFloorByRound) > 0 {
			rr = fmt.Sprintf("%.2f–%.2f", slices.Min(c.OpsRatioToFloorByRound), slices.Max(c.OpsRatioToFloorByRound))
		}
		cpu := "-"
		if c.CPUMsPerOp != nil {
			cpu = fmt.Sprintf("%.2f (%.2f, %.2f, %.2f)", c.CPUMsPerOp["total"], c.CPUMsPerOp["bench+operator"],
				c.CPUMsPerOp["kube-apiserver"], c.CPUMsPerOp["etcd"])
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t\n",
			c.Mode, c.Clients, c.Databases, c.OpsPerSecond, c.P50Ms, c.P99Ms, c.P999Ms, c.APIRequestsPerOp,
			tr, trMin, ro, rr, rp, c.Errors, cpu)
	}
	_ = tw.Flush()
	for _, f := range r.Failures {
		fmt.Fprintf(&b, "\nFAILED: %s", f)
	}
	v := r.Revocation
	fmt.Fprintf(&b, "\nrevocation: %d live leases, every primary killed at once; all new generations observed %.1f s after the kill; "+
		"each lease renewed every 1 s from before the kill, every %.0f ms from its group's observed transition\n", v.Leases, v.FailoverSeconds, v.PollIntervalMs)
	fmt.Fprintf(&b, "  new generation observed → renewal refused 409 revoked: p50 %.1f ms, p99 %.1f ms, max %.1f ms (min %.1f)\n",
		v.Refused.P50Ms, v.Refused.P99Ms, v.Refused.MaxMs, v.Refused.MinMs)
	fmt.Fprintf(&b, "  new generation observed → tombstone observed:        p50 %.1f ms, p99 %.1f ms, max %.1f ms (min %.1f)\n",
		v.Tombstone.P50Ms, v.Tombstone.P99Ms, v.Tombstone.MaxMs, v.Tombstone.MinMs)
	m := r.Memory
	fmt.Fprintf(&b, "memory: %s: %d tombstones, %.0f s settle: %.2f → %.2f MiB, %+.2f MiB → %+.2f MiB per 10,000 tombstones\n",
		m.Scope, m.Tombstones, m.SettleSeconds, float64(m.HeapBeforeBytes)/(1<<20), float64(m.HeapAfterBytes)/(1<<20),
		m.DeltaMiB, m.MiBPer10000)
	return b.String()
}

func (r *Report) write(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
