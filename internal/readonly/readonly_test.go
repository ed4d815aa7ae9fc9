package readonly

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// sampled builds a sampler over hand-made samples, one per 100 ms from t0:
// each string gives iad then pdx as W (writable), R (read-only) or ? (no
// answer).
func sampled(t0 time.Time, rows ...string) *Sampler {
	r := &Sampler{}
	for i, row := range rows {
		s := Sample{At: t0.Add(time.Duration(i) * Interval), Writable: map[string]*bool{}}
		for j, site := range []string{"iad", "pdx"} {
			switch row[j] {
			case 'W':
				s.Writable[site] = new(true)
			case 'R':
				s.Writable[site] = new(false)
			default:
				s.Writable[site] = nil
			}
		}
		r.samples = append(r.samples, s)
	}
	return r
}

func TestReadOnlySamplerQueries(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * Interval) }
	// iad is the primary, dies at 2, pdx is promoted at 4, iad returns
	// writable at 6 and is fenced at 8; 7 is a split brain.
	r := sampled(t0, "WR", "WR", "?R", "?R", "?W", "?W", "WW", "WW", "RW", "RW")
	firsts := map[string]struct {
		got  func() (time.Time, bool)
		want time.Time
		ok   bool
	}{
		"iad is first read-only again when fenced": {func() (time.Time, bool) { return r.FirstReadOnly("iad", at(6)) }, at(8), true},
		"pdx is read-only from the start":          {func() (time.Time, bool) { return r.FirstReadOnly("pdx", t0) }, at(0), true},
		"pdx is never read-only after promotion":   {func() (time.Time, bool) { return r.FirstReadOnly("pdx", at(4)) }, time.Time{}, false},
		"iad is first unknown when it dies":        {func() (time.Time, bool) { return r.FirstUnknown("iad", t0) }, at(2), true},
		"iad is first known again when it returns": {func() (time.Time, bool) { return r.FirstKnown("iad", at(3)) }, at(6), true},
		"after is inclusive":                       {func() (time.Time, bool) { return r.FirstKnown("iad", at(6)) }, at(6), true},
		"an unsampled site is never found":         {func() (time.Time, bool) { return r.FirstUnknown("sfo", t0) }, time.Time{}, false},
	}
	for name, c := range firsts {
		if got, ok := c.got(); !got.Equal(c.want) || ok != c.ok {
			t.Errorf("%s: got %v, %v; want %v, %v", name, got, ok, c.want, c.ok)
		}
	}

	two := map[string]struct {
		from, to time.Time
		want     []time.Time
	}{
		"the split brain":           {from: t0, to: at(9), want: []time.Time{at(6), at(7)}},
		"a zero to means the end":   {from: at(7), want: []time.Time{at(7)}},
		"bounds are inclusive":      {from: at(6), to: at(6), want: []time.Time{at(6)}},
		"none before the promotion": {from: t0, to: at(5)},
	}
	for name, c := range two {
		var got []time.Time
		for _, s := range r.TwoWritable(c.from, c.to) {
			got = append(got, s.At)
		}
		if !slices.EqualFunc(got, c.want, time.Time.Equal) {
			t.Errorf("TwoWritable %s: got %v, want %v", name, got, c.want)
		}
	}

	fence := map[string]struct {
		site  string
		after time.Time
		want  time.Duration
		ok    bool
	}{
		"iad fenced two samples after its return": {site: "iad", after: at(3), want: 2 * Interval, ok: true},
		"pdx never fenced after its promotion":    {site: "pdx", after: at(4)},
		"a site that came back read-only":         {site: "iad", after: at(8), want: 0, ok: true},
		"after the last sample":                   {site: "iad", after: at(10)},
	}
	for name, c := range fence {
		got, ok := r.FenceLatency(c.site, c.after)
		if got != c.want || ok != c.ok {
			t.Errorf("FenceLatency %s: got %v, %v; want %v, %v", name, got, ok, c.want, c.ok)
		}
	}
}

func TestReadOnlyTimelineShowsChangesAndMarks(t *testing.T) {
	t0 := time.Now()
	r := sampled(t0, "WR", "WR", "?R", "?R")
	r.marks = []mark{{"killed iad", t0.Add(150 * time.Millisecond)}}
	got := r.Timeline()
	want := []string{"iad=W pdx=R", "-- killed iad", "iad=? pdx=R", "iad=? pdx=R"} // first, mark, change, last
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != len(want) {
		t.Fatalf("timeline:\n%s\nwant %d lines", got, len(want))
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d %q, want it to contain %q", i, lines[i], w)
		}
	}
}
