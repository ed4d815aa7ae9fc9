package e2etest

import (
	"fmt"
	"sync"
	"time"
)

// StallWatch measures how late this process wakes up: it sleeps period
// again and again and records how far each wake-up overshot. A lease with a
// short ttl ends, correctly, when the whole machine stops for longer than
// the ttl (a paused VM, writeback that blocks every writer); a test that
// loses one says, with this, whether the machine stalled at that time.
type StallWatch struct {
	period time.Duration
	stop   chan struct{}
	done   chan struct{}

	mu       sync.Mutex
	worst    time.Duration // the longest overshoot
	worstAt  time.Time     // when the wake-up that overshot most came
	over1s   int           // wake-ups more than a second late
	stalls   []string      // the first few of them, "at (late by)"
	maxShown int
}

// StartStallWatch starts sampling every period until Stop.
func StartStallWatch(period time.Duration) *StallWatch {
	w := &StallWatch{period: period, stop: make(chan struct{}), done: make(chan struct{}), maxShown: 5}
	go w.run()
	return w
}

func (w *StallWatch) run() {
	defer close(w.done)
	t := time.NewTimer(w.period)
	defer t.Stop()
	for {
		before := time.Now()
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		w.observe(time.Now(), time.Since(before)-w.period)
		t.Reset(w.period)
	}
}

func (w *StallWatch) observe(at time.Time, late time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if late > w.worst {
		w.worst, w.worstAt = late, at
	}
	if late > time.Second {
		w.over1s++
		if len(w.stalls) < w.maxShown {
			w.stalls = append(w.stalls, fmt.Sprintf("%s (late by %v)", at.UTC().Format("15:04:05.000"), late.Round(time.Millisecond)))
		}
	}
}

// Stop ends the sampling.
func (w *StallWatch) Stop() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// String reports the worst overshoot and the wake-ups over a second late.
func (w *StallWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.worstAt.IsZero() {
		return "no wake-up measured"
	}
	return fmt.Sprintf("worst wake-up %v late at %s; %d more than 1 s late %v",
		w.worst.Round(time.Millisecond), w.worstAt.UTC().Format("15:04:05.000"), w.over1s, w.stalls)
}
