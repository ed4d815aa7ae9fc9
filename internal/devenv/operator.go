package devenv

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/shipstream/bloodraven/internal/childproc"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Listeners are an operator process's addresses.
type Listeners struct {
	TLS, Aux, Metrics, Probe string
}

// Operator is one running operator process.
type Operator struct {
	Listeners Listeners
	Log       string
	cmd       *exec.Cmd
	exited    chan error
	stopped   atomic.Bool // Stop was called: the supervisor does not restart it
}

// Exited delivers the process's exit error once, then is closed.
func (o *Operator) Exited() <-chan error { return o.exited }

// Stop sends SIGTERM (graceful shutdown, leadership released) and waits,
// killing the process after 20 s.
func (o *Operator) Stop() {
	if o == nil || o.cmd.Process == nil {
		return
	}
	o.stopped.Store(true)
	_ = o.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-o.exited:
	case <-time.After(20 * time.Second):
		_ = o.cmd.Process.Kill()
		<-o.exited
	}
}

func (p *Playground) startOperator(ctx context.Context) error {
	op, err := p.StartOperator(ctx, Listeners{TLS: p.cfg.TLSAddr, Aux: p.cfg.AuxAddr, Metrics: p.cfg.MetricsAddr, Probe: p.cfg.ProbeAddr},
		p.Paths.OperatorLog, true)
	if err != nil {
		return err
	}
	p.operator = op
	return nil
}

// StartOperator starts an operator process as the operator's ServiceAccount,
// logging to logPath, and waits until it is ready and, with wantLeader, the
// elected leader. Extra processes (a second replica, a restart) are stopped
// by their caller.
func (p *Playground) StartOperator(ctx context.Context, l Listeners, logPath string, wantLeader bool) (*Operator, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("operator log: %w", err)
	}
	cmd := exec.Command(p.cfg.OperatorBinary,
		"--deploy-api",
		"--leader-election-namespace="+OperatorNamespace,
		"--tls-cert-dir="+p.Paths.TLSDir,
		"--auxiliary-bind-address="+l.Aux,
		"--metrics-bind-address="+l.Metrics,
		"--health-probe-bind-address="+l.Probe,
		"--operator-identity="+OperatorIdentity(),
		// Real MariaDB sites: failovers move the writable primary.
		"--topology-driver=mysql",
		"--probe-interval=2s",
	)
	if len(p.cfg.WatchNamespaces) > 0 {
		cmd.Args = append(cmd.Args, "--watch-namespaces="+strings.Join(p.cfg.WatchNamespaces, ","))
	}
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+p.Paths.OperatorKubeconfig,
		"BLOODRAVEN_ESCROW_TLS_ADDR="+l.TLS,
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// If this process dies without Down, the kernel stops the operator too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	p.logf(">> starting the operator as %s (log: %s)", OperatorIdentity(), logPath)
	if err := childproc.Do(cmd.Start); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start operator %s: %w (run `make build`)", p.cfg.OperatorBinary, err)
	}
	op := &Operator{Listeners: l, Log: logPath, cmd: cmd, exited: make(chan error, 1)}
	go func() {
		err := cmd.Wait()
		logFile.Close()
		op.exited <- err
		close(op.exited)
	}()
	if err := p.waitOperatorReady(ctx, op, wantLeader); err != nil {
		op.Stop()
		return nil, err
	}
	return op, nil
}

// waitOperatorReady waits until the operator's readiness probe passes and,
// with wantLeader, it reports itself leader on the auxiliary status page.
func (p *Playground) waitOperatorReady(ctx context.Context, op *Operator, wantLeader bool) error {
	probe := "http://" + loopback(op.Listeners.Probe) + "/readyz"
	status := "http://" + loopback(op.Listeners.Aux) + "/status"
	hc := &http.Client{Timeout: 2 * time.Second}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, false, func(context.Context) (bool, error) {
		select {
		case err := <-op.exited:
			return false, fmt.Errorf("operator exited during start-up (%v); last lines of %s:\n%s", err, op.Log, tail(op.Log, 15))
		default:
		}
		return ok(hc, probe) && (!wantLeader || bodyContains(hc, status, `"leader":true`)), nil
	})
	if wait.Interrupted(err) && ctx.Err() == nil {
		return fmt.Errorf("operator not ready after 90s (%w); last lines of %s:\n%s", err, op.Log, tail(op.Log, 15))
	}
	if err != nil {
		return err
	}
	p.logf(">> operator ready (leader wanted: %v)", wantLeader)
	return nil
}

// WaitLeader waits until op reports itself the elected leader.
func (p *Playground) WaitLeader(ctx context.Context, op *Operator, timeout time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	status := "http://" + loopback(op.Listeners.Aux) + "/status"
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return bodyContains(hc, status, `"leader":true`), nil
	})
	if err != nil {
		return fmt.Errorf("operator on %s not leader after %v: %w", op.Listeners.Aux, timeout, err)
	}
	return nil
}
