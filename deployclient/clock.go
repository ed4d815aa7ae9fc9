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

// sleep waits d on clk; false when done closed first.
func sleep(clk Clock, d time.Duration, done ...<-chan struct{}) bool {
	if d <= 0 {
		for _, ch := range done {
			select {
			case <-ch:
				return false
			default:
			}
		}
		return true
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	var a, b <-chan struct{}
	if len(done) > 0 {
		a = done[0]
	}
	if len(done) > 1 {
		b = done[1]
	}
	select {
	case <-a:
		return false
	case <-b:
		return false
	case <-t.C():
		return true
	}
}
