package devenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The playground keeps its operator running as a Deployment with
// restartPolicy: Always would: when the process exits without Stop, the
// supervisor starts it again with the same listeners and log, and the
// playground's state (control plane, MariaDB sites, leases) is kept. A
// restarted operator waits for the leader-election Lease like any new
// replica: after a SIGKILL the old leader's Lease must lapse first (15 s);
// after SIGTERM it was released and the new process leads at once.
//
// The running operator's pid is in Paths.OperatorPID; `make
// dev-restart-operator` signals it (SIGTERM, or SIGNAL=KILL for a crash).

// maxFailedRestarts is how many restarts in a row may fail before the
// supervisor gives up and Exited reports it. Between failed restarts it
// waits 1 s, doubling up to maxRestartBackoff (like a kubelet's
// CrashLoopBackOff, shorter): about a minute in all, so an API server that
// is down for a while does not end the playground.
const (
	maxFailedRestarts = 8
	maxRestartBackoff = 10 * time.Second
)

type supervisor struct {
	mu       sync.Mutex
	current  *Operator
	restarts int
	changed  chan struct{} // closed and replaced at every successful restart
	stop     context.CancelFunc
	ctx      context.Context
	gaveUp   chan error
	done     chan struct{}
}

// supervise starts the supervisor for op, the playground's operator.
func (p *Playground) supervise(op *Operator) {
	ctx, cancel := context.WithCancel(context.Background())
	p.sup = &supervisor{current: op, changed: make(chan struct{}), stop: cancel, ctx: ctx,
		gaveUp: make(chan error, 1), done: make(chan struct{})}
	p.writePID(op)
	go p.superviseLoop()
}

func (p *Playground) writePID(op *Operator) {
	if op.cmd.Process != nil {
		_ = os.WriteFile(p.Paths.OperatorPID, []byte(strconv.Itoa(op.cmd.Process.Pid)+"\n"), 0o600)
	}
}

func (p *Playground) superviseLoop() {
	s := p.sup
	defer close(s.done)
	for {
		op := p.Operator()
		var exitErr error
		select {
		case exitErr = <-op.Exited():
		case <-s.ctx.Done():
			return
		}
		if s.ctx.Err() != nil || op.stopped.Load() {
			return // stopped on purpose (Stop, Down): not restarted
		}
		failed := 0
		for {
			s.mu.Lock()
			n := s.restarts + 1
			s.mu.Unlock()
			p.logf(">> the operator exited (%v); restarting it, as a Deployment's restartPolicy: Always would (restart %d; the playground's state is kept)", exitErr, n)
			next, err := p.StartOperator(s.ctx, op.Listeners, op.Log, false)
			if err == nil {
				p.writePID(next)
				s.mu.Lock()
				s.current, s.restarts = next, n
				close(s.changed)
				s.changed = make(chan struct{})
				s.mu.Unlock()
				p.logf(">> operator restarted (pid %d); it leads once the old leader's Lease is released or lapses", next.cmd.Process.Pid)
				break
			}
			if s.ctx.Err() != nil {
				return
			}
			failed++
			if failed >= maxFailedRestarts {
				s.gaveUp <- fmt.Errorf("the operator could not be restarted %d times in a row: %w", failed, err)
				close(s.gaveUp)
				return
			}
			exitErr = err
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(min(time.Second<<(failed-1), maxRestartBackoff)):
			}
		}
	}
}

// Operator is the playground's current main operator process (a new one
// after every restart).
func (p *Playground) Operator() *Operator {
	if p.sup == nil {
		return p.operator
	}
	p.sup.mu.Lock()
	defer p.sup.mu.Unlock()
	return p.sup.current
}

// Restarts is how many times the supervisor restarted the operator.
func (p *Playground) Restarts() int {
	p.sup.mu.Lock()
	defer p.sup.mu.Unlock()
	return p.sup.restarts
}

// WaitRestart waits until the operator has been restarted more than after
// times, and returns the running process.
func (p *Playground) WaitRestart(ctx context.Context, after int, timeout time.Duration) (*Operator, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.sup.mu.Lock()
		n, op, changed := p.sup.restarts, p.sup.current, p.sup.changed
		p.sup.mu.Unlock()
		if n > after {
			return op, nil
		}
		select {
		case <-changed:
		case err, ok := <-p.sup.gaveUp:
			if ok {
				return nil, err
			}
			return nil, errors.New("the supervisor gave up")
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			return nil, fmt.Errorf("the operator was not restarted within %v", timeout)
		}
	}
}

// Exited delivers an error when the supervisor gave up restarting the
// operator, then is closed.
func (p *Playground) Exited() <-chan error { return p.sup.gaveUp }

// stopSupervisor ends supervision and stops the current operator.
func (p *Playground) stopSupervisor() {
	if p.sup == nil {
		p.operator.Stop()
		return
	}
	p.sup.stop()
	<-p.sup.done
	p.Operator().Stop()
	_ = os.Remove(p.Paths.OperatorPID)
}

// Kill sends SIGKILL to the process, as a crash would: for the
// playground's operator, the supervisor starts a new one.
func (o *Operator) Kill() error { return o.cmd.Process.Signal(syscall.SIGKILL) }

// Pid is the process id.
func (o *Operator) Pid() int { return o.cmd.Process.Pid }
