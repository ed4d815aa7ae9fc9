package e2etest

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/internal/testenv"
)

// DeployRun is a `bloodraven deploy run` process against a playground,
// started with the playground's deploy token and CA. It is killed when the
// test ends.
type DeployRun struct {
	// Outcome is the run's --outcome-file.
	Outcome string
	cmd     *exec.Cmd
	out     lockedBuffer
	done    chan struct{}
	err     error
}

// StartDeployRun starts `bloodraven deploy run` with flags (--group,
// --instance, --ttl, ...) and command.
func StartDeployRun(t *testing.T, p *devenv.Playground, cfg devenv.Config, flags []string, command ...string) *DeployRun {
	t.Helper()
	return StartDeployRunEnv(t, p, cfg, nil, flags, command...)
}

// StartDeployRunEnv is StartDeployRun with env (KEY=value) added to the
// run's environment, which its command inherits.
func StartDeployRunEnv(t *testing.T, p *devenv.Playground, cfg devenv.Config, env, flags []string, command ...string) *DeployRun {
	t.Helper()
	r := &DeployRun{Outcome: filepath.Join(t.TempDir(), "outcome.json"), done: make(chan struct{})}
	args := append([]string{"deploy", "run", "--server", "https://" + cfg.TLSAddr, "--ca", p.Paths.CACert,
		"--token-file", p.Paths.DeployToken, "--outcome-file", r.Outcome}, flags...)
	r.cmd = exec.Command(cfg.OperatorBinary, append(append(args, "--"), command...)...)
	r.cmd.Env = append(append(os.Environ(), "TMPDIR="+testenv.ShortTempDir(t)), env...)
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.err = r.cmd.Wait(); close(r.done) }()
	t.Cleanup(func() { _ = r.cmd.Process.Kill(); <-r.done })
	return r
}

// Done is closed when the run has exited.
func (r *DeployRun) Done() <-chan struct{} { return r.done }

// ExitCode is the run's exit code once Done (-1 if it did not exit).
func (r *DeployRun) ExitCode() int {
	var ee *exec.ExitError
	switch {
	case r.err == nil:
		return 0
	case errors.As(r.err, &ee):
		return ee.ExitCode()
	}
	return -1
}

// Err is how the run ended once Done (nil: exit 0).
func (r *DeployRun) Err() error { return r.err }

// Output is what the run printed so far (stdout and stderr).
func (r *DeployRun) Output() string { return r.out.String() }

// Recorded is the outcome file's content ("" and the error if unreadable).
func (r *DeployRun) Recorded() (string, error) {
	b, err := os.ReadFile(r.Outcome)
	return string(b), err
}

// WaitExit waits up to within for the run to exit, and fails the test
// unless it exited want (why says what that code means) and its outcome
// file records outcome.
func (r *DeployRun) WaitExit(t *testing.T, within time.Duration, want int, why, outcome string) {
	t.Helper()
	select {
	case <-r.done:
		if r.ExitCode() != want {
			t.Fatalf("deploy run ended with %v, want exit %d (%s); output:\n%s", r.err, want, why, r.Output())
		}
	case <-time.After(within):
		t.Fatalf("deploy run still running after %v; output:\n%s", within, r.Output())
	}
	if rec, err := r.Recorded(); err != nil || !strings.Contains(rec, outcome) {
		t.Fatalf("outcome file: %v %s", err, rec)
	}
}

// lockedBuffer is a bytes.Buffer that the process writes while the test
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Kill sends SIGKILL to the run's own process (not its command): a runner
// lost at once, with no release and no outcome written.
func (r *DeployRun) Kill() error { return r.cmd.Process.Kill() }
