package deploycmd

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/shipstream/bloodraven/deployclient"
)

type runFlags struct {
	conn        connFlags
	group       string
	instance    string
	operationID string
	ttl         int
	onAbort     string
	wait        time.Duration
	grace       time.Duration
	outcomeFile string
}

// outcome is what a run records before it releases the migration mutex.
type outcome struct {
	Group              string `json:"group"`
	Instance           string `json:"instance"`
	OperationID        string `json:"operationId"`
	TopologyGeneration int64  `json:"topologyGeneration"`
	// Outcome is succeeded, failed, lost-before-ddl, abort-failed or
	// lost-after-ddl.
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
	At      string `json:"at"`
}

func runCmd(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	var f runFlags
	fs := flag.NewFlagSet("bloodraven deploy run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: bloodraven deploy run --group G --instance I [flags] -- COMMAND [ARGS]\n\n"+
			"Takes the group's migration mutex, then the failover-hold, runs COMMAND while both are renewed,\n"+
			"and stops it when authority is lost. Exit codes: 0 success, 1 command failed, 2 usage,\n"+
			"3 could not acquire, 4 lost before the DDL boundary, 5 lost at or after it (verify the schema),\n"+
			"6 lost before the DDL boundary and --on-abort failed.\n\nflags:\n")
		fs.PrintDefaults()
	}
	f.conn.register(fs, getenv)
	fs.StringVar(&f.group, "group", "", "MysqlFailoverGroup name (required)")
	fs.StringVar(&f.instance, "instance", "", "MysqlDatabase name: the lease's instance (required)")
	fs.StringVar(&f.operationID, "operation-id", "", "operation id, 1-128 of [A-Za-z0-9._:-]; default a random UUID")
	fs.IntVar(&f.ttl, "ttl", 30, "lease ttl in seconds; the server clamps it to [5, 120]; renewed every ttl/3")
	fs.StringVar(&f.onAbort, "on-abort", "", "shell command run (sh -c) when authority is lost before the DDL boundary: the application's fenced abort")
	fs.DurationVar(&f.wait, "wait", 5*time.Minute, "how long to wait for a held mutex (and transient refusals) before giving up with exit 3")
	fs.DurationVar(&f.grace, "grace", 0, "time from SIGTERM to SIGKILL when the command is stopped; the stop starts this long before the lease's deadline, so the command is gone by then; at most ttl/3 (default ttl/3, at most 10s)")
	fs.StringVar(&f.outcomeFile, "outcome-file", "", "file the outcome is written to (JSON, synced) before the migration mutex is released; when it cannot be written the mutex is left to lapse")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	command := fs.Args()
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "bloodraven deploy: "+format+"\n", a...) }
	switch {
	case f.group == "" || f.instance == "":
		logf("--group and --instance are required")
		return ExitUsage
	case len(command) == 0:
		logf("no command: give it after --, for example: bloodraven deploy run --group G --instance I -- migrate up")
		return ExitUsage
	case f.ttl <= 0:
		logf("--ttl must be a positive number of seconds")
		return ExitUsage
	}
	// The server clamps the ttl to [5, 120]; the grace must fit in a
	// renewal interval, or a healthy run would be stopped.
	interval := time.Duration(min(max(f.ttl, 5), 120)) * time.Second / 3
	switch {
	case f.grace < 0 || f.grace > interval:
		logf("--grace %s must be between 0 and ttl/3 (%s): the command is stopped that long before the lease's deadline", f.grace, interval.Round(100*time.Millisecond))
		return ExitUsage
	case f.grace == 0:
		f.grace = min(10*time.Second, interval)
	}
	if f.operationID == "" {
		f.operationID = newOperationID()
	}
	client, err := f.conn.client()
	if err != nil {
		logf("%v", err)
		return ExitUsage
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	actx, cancelAcquire := context.WithCancel(context.Background())
	defer cancelAcquire()
	acquired, watcher := make(chan struct{}), make(chan struct{})
	pending := make(chan os.Signal, 1)
	go func() {
		defer close(watcher)
		select {
		case s := <-sigs:
			logf("received %s while acquiring: giving up", s)
			pending <- s
			cancelAcquire()
		case <-acquired:
		}
	}()

	logf("acquiring the migration mutex of group %s for instance %s (operation %s, ttl %ds, waiting up to %s)", f.group, f.instance, f.operationID, f.ttl, f.wait)
	sess, err := deployclient.Acquire(actx, deployclient.SessionConfig{
		Client: client, Group: f.group, Instance: f.instance, OperationID: f.operationID,
		TTL: time.Duration(f.ttl) * time.Second, Wait: f.wait,
		Progress: func(m string) { logf("%s", m) },
		// The loss is declared a little more than --grace before the
		// deadline (the session caps it at ttl/3), so that SIGTERM, the
		// grace and SIGKILL all fit before the deadline.
		Margin: f.grace + killSlack,
	})
	close(acquired)
	<-watcher
	if err != nil {
		logf("could not acquire: %s", explain(err, f.group, f.instance, f.operationID, f.conn.tokenFile, f.wait))
		return ExitNotAcquired
	}
	select {
	case <-pending: // a signal came as the leases were granted: do not start
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := sess.Release(ctx, nil); err != nil {
			logf("release: %v", err)
		}
		return ExitNotAcquired
	default:
	}
	logf("holding the migration mutex and the failover-hold of group %s (operation %s, topology generation %d, ttl %s, renewed every %s)",
		f.group, f.operationID, sess.Generation(), sess.TTL(), (sess.TTL() / 3).Round(100*time.Millisecond))

	r := &runner{f: f, sess: sess, logf: logf, stdout: stdout, stderr: stderr}
	return r.run(command, stdin, stdout, stderr, sigs)
}

type runner struct {
	f              runFlags
	sess           *deployclient.Session
	logf           func(string, ...any)
	stdout, stderr io.Writer
}

func (r *runner) run(command []string, stdin io.Reader, stdout, stderr io.Writer, sigs <-chan os.Signal) int {
	dir, err := os.MkdirTemp("", "bloodraven-deploy-")
	if err != nil {
		r.logf("marker directory: %v", err)
		return r.finish(ExitChildFailed, "failed", fmt.Sprintf("could not create the DDL marker directory: %v", err))
	}
	defer os.RemoveAll(dir)
	marker := filepath.Join(dir, "ddl-started")

	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.Env = append(r.childEnv(), EnvDDLMarker+"="+marker)
	// Its own process group, so that SIGTERM and SIGKILL reach everything it
	// started; and SIGKILL if this process dies (Pdeathsig), so that a run
	// killed outright does not leave the command running unfenced.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if !r.sess.Held() {
		r.logf("AUTHORITY LOST before the command started: %v", r.lostErr())
		return r.lost(marker)
	}
	started, exited := make(chan error, 1), make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that started the command ends:
		// keep this goroutine on its thread until the command has exited.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		r.logf("could not start %q: %v", commandLine(command), err)
		return r.finish(ExitChildFailed, "failed", fmt.Sprintf("could not start: %v", err))
	}
	pid := cmd.Process.Pid
	defer func() { _ = syscall.Kill(-pid, syscall.SIGKILL) }() // whatever happens below
	r.logf("started %q (pid %d); it marks the DDL boundary with 'bloodraven deploy mark-ddl' or by creating $%s", commandLine(command), pid, EnvDDLMarker)

	var childErr error
	lost := false
wait:
	for {
		select {
		case childErr = <-exited:
			break wait
		case <-r.sess.Lost():
			lost = true
			r.logf("AUTHORITY LOST: %v", r.sess.Err())
			r.logf("stopping %q: SIGTERM, then SIGKILL after %s at the latest, before the lease's deadline", commandLine(command), r.f.grace)
			childErr = stop(pid, exited, r.killBy())
			break wait
		case s := <-sigs:
			r.logf("received %s: passing it on to %q", s, commandLine(command))
			_ = syscall.Kill(-pid, s.(syscall.Signal))
		}
	}
	// Whatever the command left running in its group is stopped before any
	// lease is released.
	if !lost {
		stopLeftovers(pid, r.f.grace, r.logf)
	}
	// The command may have finished just as the lease was lost, or past its
	// deadline before the loss was reported: the work ran without confirmed
	// authority for a moment, so it counts as lost.
	if !lost && !r.sess.Held() {
		lost = true
		r.logf("AUTHORITY LOST as the command ended: %v", r.lostErr())
	}
	if lost {
		return r.lost(marker)
	}
	if childErr != nil {
		r.logf("%q failed: %v", commandLine(command), childErr)
		return r.finish(ExitChildFailed, "failed", childErr.Error())
	}
	r.logf("%q succeeded", commandLine(command))
	return r.finish(ExitOK, "succeeded", "")
}

func (r *runner) childEnv() []string {
	return append(os.Environ(),
		EnvGroup+"="+r.f.group,
		EnvInstance+"="+r.f.instance,
		EnvOperationID+"="+r.f.operationID,
		EnvGeneration+"="+strconv.FormatInt(r.sess.Generation(), 10),
	)
}

// lostErr is the session's loss, or, when the deadline passed before the
// heartbeat reported it, that.
func (r *runner) lostErr() error {
	if err := r.sess.Err(); err != nil {
		return err
	}
	return &deployclient.LostError{Kind: deployclient.KindMigration, Cause: deployclient.CauseDeadlinePassed, GrantGeneration: r.sess.Generation()}
}

// stopLeftovers stops what the command left running in its process group
// (a backgrounded tool): SIGTERM, then SIGKILL after grace.
func stopLeftovers(pid int, grace time.Duration, logf func(string, ...any)) {
	if syscall.Kill(-pid, 0) != nil {
		return // the group is empty
	}
	logf("the command left processes running in its group: SIGTERM, then SIGKILL after %s", grace)
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	for end := time.Now().Add(grace); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if syscall.Kill(-pid, 0) != nil {
			return
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// killSlack is how long before the confirmed deadline the command gets
// SIGKILL at the latest, against late timers on a loaded machine.
const killSlack = 250 * time.Millisecond

// killBy is when the command gets SIGKILL: --grace from now, and never later
// than killSlack before the earliest confirmed deadline of the two leases.
func (r *runner) killBy() time.Time {
	by := time.Now().Add(r.f.grace)
	for _, kind := range []string{deployclient.KindMigration, deployclient.KindFailoverHold} {
		if d := r.sess.Deadline(kind).Add(-killSlack); d.Before(by) {
			by = d
		}
	}
	return by
}

// stop sends SIGTERM to the command's process group, then SIGKILL at
// killBy, and returns how the command ended.
func stop(pid int, exited <-chan error, killBy time.Time) error {
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	t := time.NewTimer(time.Until(killBy))
	defer t.Stop()
	select {
	case err := <-exited:
		_ = syscall.Kill(-pid, syscall.SIGKILL) // anything it left behind
		return err
	case <-t.C:
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return <-exited
	}
}

// lost handles lost authority: the hold is released first, then the DDL
// boundary decides between the fenced abort and a stop for a person.
func (r *runner) lost(marker string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.sess.ReleaseHold(ctx); err != nil {
		r.logf("the failover-hold could not be released (%v); it lapses at its ttl", err)
	}
	lostErr := r.lostErr()
	if _, err := os.Stat(marker); err == nil {
		r.logf("the DDL boundary had been passed: the schema of %s may be partly changed", r.f.instance)
		r.logf("STOP: a person must verify the schema before any retry. Do not reconnect to the new primary to finish the migration. Operation %s will not be granted again.", r.f.operationID)
		return r.finish(ExitLostAfterDDL, "lost-after-ddl", lostErr.Error())
	}
	r.logf("the DDL boundary was not reached: no schema change was started")
	if r.f.onAbort == "" {
		r.logf("no --on-abort command given: nothing to clean up")
		return r.finish(ExitLostBeforeDDL, "lost-before-ddl", lostErr.Error())
	}
	r.logf("running the fenced abort: %s", r.f.onAbort)
	abort := exec.Command("/bin/sh", "-c", r.f.onAbort)
	abort.Stdout, abort.Stderr = r.stdout, r.stderr
	abort.Env = append(r.childEnv(), EnvLostCause+"="+lostCause(lostErr))
	if err := abort.Run(); err != nil {
		r.logf("the abort command failed: %v; clean up by hand before any retry", err)
		return r.finish(ExitAbortFailed, "abort-failed", lostErr.Error())
	}
	r.logf("the abort command succeeded")
	return r.finish(ExitLostBeforeDDL, "lost-before-ddl", lostErr.Error())
}

func lostCause(err error) string {
	var l *deployclient.LostError
	if errors.As(err, &l) {
		if l.Reason != "" {
			return string(l.Cause) + ":" + l.Reason
		}
		return string(l.Cause)
	}
	return "unknown"
}

// finish records the outcome and releases: the hold first, then (after the
// record) the migration mutex.
func (r *runner) finish(code int, result, detail string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec := outcome{Group: r.f.group, Instance: r.f.instance, OperationID: r.f.operationID,
		TopologyGeneration: r.sess.Generation(), Outcome: result, Detail: detail, At: time.Now().UTC().Format(time.RFC3339Nano)}
	recorded := func(context.Context) error {
		if r.f.outcomeFile == "" {
			return nil
		}
		b, _ := json.MarshalIndent(rec, "", "  ")
		return writeSynced(r.f.outcomeFile, append(b, '\n'))
	}
	if err := r.sess.Release(ctx, recorded); err != nil {
		r.logf("release: %v", err)
		if errors.Is(err, deployclient.ErrNotRecorded) && (code == ExitOK || code == ExitChildFailed) {
			return ExitNotRecorded
		}
	} else {
		r.logf("outcome %s recorded; the failover-hold and the migration mutex are released", result)
	}
	return code
}
