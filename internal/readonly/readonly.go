package readonly

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Timing of a Sampler.
const (
	// Interval is the time between two samples' starts (a tick
	// whose queries take longer delays the next one), unless
	// StartEvery sets another.
	Interval = 100 * time.Millisecond
	// QueryBound bounds each site's query (connect included): a
	// paused or unreachable site is unknown in that sample.
	QueryBound = 300 * time.Millisecond
)

// Sample is one tick of a Sampler.
type Sample struct {
	// At is when the tick's last answer arrived, or its bound expired:
	// every answer was read by then, from a query sent at most
	// QueryBound earlier (a paused site that resumes within the
	// bound answers in the sample that asked before it resumed).
	At time.Time
	// Writable holds, per site, whether it answered read_only=0 (true) or
	// 1 (false); nil when it did not answer within QueryBound.
	Writable map[string]*bool
}

// Sampler samples SELECT @@global.read_only on every site every
// Interval, straight on the servers, and keeps every sample and
// every mark. It is an observer: it never changes a site.
type Sampler struct {
	dbs      map[string]*sql.DB
	interval time.Duration
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once

	mu      sync.Mutex
	samples []Sample
	marks   []mark
}

type mark struct {
	name string
	at   time.Time
}

// Start starts sampling sites (name to go-sql-driver DSN);
// the first sample is taken before it returns. It stops when the test ends,
// and then logs the timeline if the test failed.
func Start(t *testing.T, sites map[string]string) *Sampler {
	t.Helper()
	return StartEvery(t, sites, Interval)
}

// StartEvery is Start with the given interval
// between two samples' starts (Interval by default): a test that
// hunts for a short overlap of two writable sites samples more often.
func StartEvery(t *testing.T, sites map[string]string, interval time.Duration) *Sampler {
	t.Helper()
	r := &Sampler{dbs: map[string]*sql.DB{}, interval: interval, stop: make(chan struct{}), done: make(chan struct{})}
	for name, dsn := range sites {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			t.Fatalf("read-only sampler: %s: %v", name, err)
		}
		db.SetMaxOpenConns(1) // one query per site at a time: ticks do not overlap
		r.dbs[name] = db
	}
	r.tick()
	go r.run()
	t.Cleanup(func() {
		r.Stop()
		if t.Failed() {
			t.Logf("read_only timeline (W writable, R read-only, ? unknown):\n%s", r.Timeline())
		}
	})
	return r
}

// Stop stops sampling and waits for the last tick; it is idempotent.
func (r *Sampler) Stop() {
	r.once.Do(func() {
		close(r.stop)
		<-r.done
		for _, db := range r.dbs {
			_ = db.Close()
		}
	})
}

func (r *Sampler) run() {
	defer close(r.done)
	tk := time.NewTicker(r.interval)
	defer tk.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-tk.C:
			r.tick()
		}
	}
}

// tick queries every site at once, each within QueryBound.
func (r *Sampler) tick() {
	s := Sample{Writable: map[string]*bool{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, db := range r.dbs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), QueryBound)
			defer cancel()
			var readOnly int64 // as the topology driver reads it
			if err := db.QueryRowContext(ctx, "SELECT @@global.read_only").Scan(&readOnly); err != nil {
				return // unknown
			}
			writable := readOnly == 0
			mu.Lock()
			s.Writable[name] = &writable
			mu.Unlock()
		})
	}
	wg.Wait()
	s.At = time.Now()
	for name := range r.dbs {
		if _, ok := s.Writable[name]; !ok {
			s.Writable[name] = nil
		}
	}
	r.mu.Lock()
	r.samples = append(r.samples, s)
	r.mu.Unlock()
}

// Mark records the named instant (shown in the timeline) and returns it.
func (r *Sampler) Mark(name string) time.Time {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.marks = append(r.marks, mark{name, now})
	return now
}

// Marked is the instant of the latest mark of that name.
func (r *Sampler) Marked(name string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.marks) - 1; i >= 0; i-- {
		if r.marks[i].name == name {
			return r.marks[i].at, true
		}
	}
	return time.Time{}, false
}

// Samples is a copy of the samples so far, oldest first.
func (r *Sampler) Samples() []Sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.samples)
}

// TwoWritable returns the samples taken in [from, to] (a zero to: up to the
// latest) in which two or more sites answered read_only=0: a split brain the
// sampler saw. Its resolution is its interval; a shorter overlap may fall
// between two samples.
func (r *Sampler) TwoWritable(from, to time.Time) []Sample {
	var out []Sample
	for _, s := range r.Samples() {
		if s.At.Before(from) || (!to.IsZero() && s.At.After(to)) {
			continue
		}
		n := 0
		for _, w := range s.Writable {
			if w != nil && *w {
				n++
			}
		}
		if n >= 2 {
			out = append(out, s)
		}
	}
	return out
}

// FirstReadOnly is the time of the first sample at or after after in which
// site answered read_only=1.
func (r *Sampler) FirstReadOnly(site string, after time.Time) (time.Time, bool) {
	return r.first(site, after, func(w *bool) bool { return w != nil && !*w })
}

// FirstKnown is the time of the first sample at or after after in which
// site answered at all.
func (r *Sampler) FirstKnown(site string, after time.Time) (time.Time, bool) {
	return r.first(site, after, func(w *bool) bool { return w != nil })
}

// FirstUnknown is the time of the first sample at or after after in which
// site did not answer.
func (r *Sampler) FirstUnknown(site string, after time.Time) (time.Time, bool) {
	return r.first(site, after, func(w *bool) bool { return w == nil })
}

// FenceLatency measures how long a returning site stayed unfenced: from the
// first sample at or after after (the instant it was resumed or restarted)
// in which site answered, to the first from then on in which it answered
// read_only=1. It is 0 if the site came back read-only; false if it did not
// answer, or was never seen read-only, after after. Resolution: the
// sampler's interval.
func (r *Sampler) FenceLatency(site string, after time.Time) (time.Duration, bool) {
	back, ok := r.FirstKnown(site, after)
	if !ok {
		return 0, false
	}
	fenced, ok := r.FirstReadOnly(site, back)
	if !ok {
		return 0, false
	}
	return fenced.Sub(back), true
}

func (r *Sampler) first(site string, after time.Time, match func(*bool) bool) (time.Time, bool) {
	for _, s := range r.Samples() {
		if w, ok := s.Writable[site]; ok && !s.At.Before(after) && match(w) {
			return s.At, true
		}
	}
	return time.Time{}, false
}

// Timeline lists the marks and every sample whose answers differ from the
// previous sample's, one line each, times relative to the first sample.
func (r *Sampler) Timeline() string {
	r.mu.Lock()
	samples, marks := slices.Clone(r.samples), slices.Clone(r.marks)
	r.mu.Unlock()
	if len(samples) == 0 {
		return ""
	}
	start := samples[0].At
	sites := slices.Sorted(maps.Keys(samples[0].Writable))
	var b strings.Builder
	prev := ""
	for i, s := range samples {
		for len(marks) > 0 && !marks[0].at.After(s.At) {
			fmt.Fprintf(&b, "%9s  -- %s\n", marks[0].at.Sub(start).Round(time.Millisecond), marks[0].name)
			marks = marks[1:]
		}
		var line strings.Builder
		for _, site := range sites {
			state := "?"
			if w := s.Writable[site]; w != nil && *w {
				state = "W"
			} else if w != nil {
				state = "R"
			}
			fmt.Fprintf(&line, " %s=%s", site, state)
		}
		if line.String() != prev || i == len(samples)-1 {
			fmt.Fprintf(&b, "%9s %s\n", s.At.Sub(start).Round(time.Millisecond), line.String())
			prev = line.String()
		}
	}
	for _, m := range marks {
		fmt.Fprintf(&b, "%9s  -- %s\n", m.at.Sub(start).Round(time.Millisecond), m.name)
	}
	return b.String()
}
