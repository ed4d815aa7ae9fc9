package server

import (
	"sync/atomic"
)

// LeaderState reports whether this replica currently leads. It becomes true
// when the manager's Elected channel closes. A replica that loses its lease is
// stopped by controller-runtime (the process exits), so the state never goes
// back from true to false within one process.
type LeaderState struct {
	elected atomic.Bool
}

// WatchElected marks the state as leader once elected is closed. It returns
// immediately; the watch ends with stop.
func (l *LeaderState) WatchElected(elected <-chan struct{}, stop <-chan struct{}) {
	go func() {
		select {
		case <-elected:
			l.elected.Store(true)
		case <-stop:
		}
	}()
}

// IsLeader tells whether this replica is the elected leader.
func (l *LeaderState) IsLeader() bool { return l.elected.Load() }
