package bench

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// A renewal cell aggregates its mode's slices: operations, errors, API
// requests and CPU are summed, latencies merged, ops/s taken over every
// measured window, and each slice is compared with the floor slice of its
// own round.
func TestACellAggregatesItsInterleavedSlices(t *testing.T) {
	start := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	mk := func(at time.Duration, lat []time.Duration, total, errs int, requests, cpu float64, err error) slice {
		return slice{run: run{latencies: lat, total: total, errors: errs, firstErr: err, elapsed: 4 * time.Second},
			api: apiCounts{Requests: requests, TokenReviews: 1}, cpu: cpuSample{"bench+operator": cpu},
			start: start.Add(at), measured: float64(len(lat)) / 3}
	}
	product := []slice{
		mk(0, ms(3, 1, 2), 4, 0, 12, 0.004, nil),
		mk(8*time.Second, ms(5, 4, 6, 7, 8, 9), 8, 1, 24, 0.008, errors.New("first")),
	}
	floor := []slice{mk(4*time.Second, ms(1, 1, 1), 4, 0, 12, 0.004, nil), mk(12*time.Second, ms(1, 1, 1), 4, 0, 12, 0.004, nil)}

	c := cellOf(product, 3*time.Second)
	if c.Rounds != 2 || c.Ops != 9 || c.TotalOps != 12 || c.Errors != 1 || c.FirstErr != "first" {
		t.Errorf("counts: %+v", c)
	}
	if c.OpsPerSecond != 1.5 || c.Seconds != 8 || c.SpanSeconds != 12 {
		t.Errorf("rates: %v ops/s over %v s, span %v s; want 1.5, 8, 12", c.OpsPerSecond, c.Seconds, c.SpanSeconds)
	}
	if c.P50Ms != 5 || c.P99Ms != 9 || c.APIRequests != 36 || c.APIRequestsPerOp != 3 || *c.TokenReviews != 2 {
		t.Errorf("merged figures: p50 %v p99 %v, %v requests (%v per op), %v reviews", c.P50Ms, c.P99Ms, c.APIRequests, c.APIRequestsPerOp, *c.TokenReviews)
	}
	if got := c.CPUMsPerOp["bench+operator"]; got != 1 {
		t.Errorf("cpu: %v ms per op, want 1", got)
	}
	if got := roundRatios(product, floor); !slices.Equal(got, []float64{1, 2}) {
		t.Errorf("round ratios %v, want [1 2]", got)
	}
	if got := roundRatios(product, floor[:1]); got != nil {
		t.Errorf("rounds without a floor slice each: %v, want none", got)
	}
}
