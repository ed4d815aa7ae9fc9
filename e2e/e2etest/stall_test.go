package e2etest

import (
	"strings"
	"testing"
	"time"
)

func TestStallWatchReportsTheWorstAndTheLongWakeUps(t *testing.T) {
	w := &StallWatch{maxShown: 2}
	at := time.Date(2026, 12, 3, 19, 2, 30, 0, time.UTC)
	for i, late := range []time.Duration{time.Millisecond, 6 * time.Second, 1500 * time.Millisecond, 2 * time.Second, 3 * time.Millisecond} {
		w.observe(at.Add(time.Duration(i)*time.Second), late)
	}
	got := w.String()
	for _, want := range []string{"worst wake-up 6s late at 19:02:31.000", "3 more than 1 s late", "19:02:31.000 (late by 6s)", "19:02:32.000 (late by 1.5s)"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q does not say %q", got, want)
		}
	}
	if strings.Contains(got, "19:02:33") {
		t.Errorf("%q lists more than maxShown stalls", got)
	}
}

func TestStallWatchStops(t *testing.T) {
	w := StartStallWatch(5 * time.Millisecond)
	deadline := time.Now().Add(30 * time.Second)
	for strings.Contains(w.String(), "no wake-up") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	w.Stop()
	w.Stop() // twice is fine
	if strings.Contains(w.String(), "no wake-up") {
		t.Errorf("nothing measured in 30 s at 5 ms: %s", w)
	}
}
