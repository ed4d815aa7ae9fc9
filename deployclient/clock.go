package deployclient

import "time"

// Clock is the one clock a session reads: every deadline, wait and backoff
// goes through it. Now must carry a monotonic reading (the real clock's
// does), so that deadlines are measured on the client's monotonic clock
// and a wall-clock step cannot stretch them.
type Clock interface {
	Now() time.Time
	// NewTimer fires once, d from now.
	NewTimer(d time.Duration) Timer
}

// Timer is a Clock's one-shot timer.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// RealClock is the process's clock.
type RealClock struct{}

// Now is time.Now.
func (RealClock) Now() time.Time { return time.Now() }

// NewTimer is time.NewTimer.
func (RealClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

// sleep waits d on clk; false when a or b closed first (a nil channel
// never does).
func sleep(clk Clock, d time.Duration, a, b <-chan struct{}) bool {
	select {
	case <-a:
		return false
	case <-b:
		return false
	default:
	}
	if d <= 0 {
		return true
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-a:
		return false
	case <-b:
		return false
	case <-t.C():
		return true
	}
}
