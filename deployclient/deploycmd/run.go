package deploycmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/shipstream/bloodraven/deployclient"
)

type runFlags struct {
	conn        connFlags
	group       string
	instance    string
	operationID string
	ttl         int
	onAbort     string
	// onAbortTimeout bounds the --on-abort command.
	onAbortTimeout time.Duration
	wait           time.Duration
	grace          time.Duration
	outcomeFile    string
	takeOver       bool
	// postponeFile is gh-ost's postpone flag file (--postpone-flag-file);
	// cutOverBudget the margin its removal needs.
	postponeFile  string
	cutOverBudget time.Duration
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
	// Namespace is the group's namespace the run pinned, when known.
	Namespace string `json:"namespace,omitempty"`
	// CommandExitCode is the command's own exit code, when it exited (the
	// run's exit code is 1 for any failure: 2-8 are the run's own).
	CommandExitCode *int `json:"commandExitCode,omitempty"`
	// LostStage, when authority was lost: pre-ddl (before the boundary:
	// an online schema change's copy), awaiting-cut-over (the tool's
	// cut-over was waiting to be allowed) or ddl.
	LostStage string `json:"lostStage,omitempty"`
	At        string `json:"at"`
}

// runHelp is run's long help: what it does and its exit codes.
const runHelp = `Takes the group's migration mutex, then the failover-hold, runs COMMAND while both are renewed
and watched, and stops it when authority is lost. The run succeeds only if a renewal sent after
COMMAND exited (phase done) was confirmed at the grant's topology generation.

One runner at a time: an operation id that is live under another runner (a retried Job pod, a
re-run CI job) is not started again; without --take-over the run exits 3 and names it, with
--take-over it waits 120 s (the longest ttl) so the other runner's command is certainly stopped.
A grant retried after a lost answer and answered 200 is handled the same way: the lost request may
have re-granted another runner's operation, and the answer cannot tell that from this run's own.

Exit codes:
  0  COMMAND succeeded and authority was confirmed after it ended
  1  COMMAND failed (or could not start) while authority was held
  2  usage: bad flags or local configuration
  3  could not acquire now (mutex held past --wait, operation live under another runner,
     API unreachable): retry later
  4  authority lost before the DDL boundary; COMMAND stopped, --on-abort (if any) succeeded
  5  authority lost at or after the DDL boundary: a person must verify the schema
  6  authority lost before the DDL boundary and --on-abort failed, or did not end within
     --on-abort-timeout (its process group was then killed)
  7  COMMAND ended but the outcome could not be written to --outcome-file (the mutex lapses)
  8  refused for good (403 forbidden, 409 revoked, 409 verification_required): do not retry as is;
     without --namespace, a 403 may mean the group's name exists in more than one namespace
     that authorizes this ServiceAccount: --namespace settles it

The group's namespace is pinned: --namespace, or else the namespace the first answer names (the
group's observation). Every later request names it, and an answer that names another one is
treated as a loss of authority (4 or 5), or refused (8) before COMMAND starts.

COMMAND gets BLOODRAVEN_GROUP, BLOODRAVEN_INSTANCE, BLOODRAVEN_OPERATION_ID,
BLOODRAVEN_TOPOLOGY_GENERATION and BLOODRAVEN_DDL_MARKER; it runs 'bloodraven deploy mark-ddl'
(which returns only once the operator confirmed the boundary) before its first schema change.
An online-schema-change tool (pt-online-schema-change, gh-ost) marks it at its cut-over instead:
its cut-over hook runs 'bloodraven deploy cut-over', which waits until cutting over is safe; with
--postpone-flag-file the run keeps gh-ost's postpone file in place until then. A loss during the
copy is a loss before the boundary (exit 4, no gate). The abort command gets
BLOODRAVEN_LOST_CAUSE and BLOODRAVEN_LOST_STAGE (pre-ddl, or awaiting-cut-over).

COMMAND and the --on-abort command each run in their own process group. On Linux each is started
through a small supervisor (this binary again, a child subreaper): if the run is killed outright
(SIGKILL), the supervisor kills the whole process group and every process that left it, so
nothing the command started keeps running.`

func runCommand(stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run --group G --instance I [flags] -- COMMAND [ARGS...]",
		Short: "Hold the group's migration mutex and failover-hold around a command",
		Long:  runHelp,
		RunE: func(cmd *cobra.Command, command []string) error {
			return exitCode(runMain(f, command, stdin, stdout, stderr, deployclient.RealClock{}))
		},
	}
	fs := cmd.Flags()
	fs.SetInterspersed(false) // everything after COMMAND is COMMAND's
	f.conn.register(fs, getenv)
	fs.StringVar(&f.group, "group", "", "MysqlFailoverGroup name (required)")
	fs.StringVar(&f.instance, "instance", "", "MysqlDatabase name: the lease's instance (required)")
	fs.StringVar(&f.operationID, "operation-id", "", "operation id, 1-128 of [A-Za-z0-9._:-]; default a random UUID; use one per pipeline run, e.g. <git-sha>-<run-id>")
	fs.IntVar(&f.ttl, "ttl", 30, "lease ttl in seconds; the server clamps it to [5, 120]; renewed every ttl/3")
	fs.StringVar(&f.onAbort, "on-abort", "", "shell command run (sh -c) when authority is lost before the DDL boundary: the application's fenced abort")
	fs.DurationVar(&f.onAbortTimeout, "on-abort-timeout", 5*time.Minute, "how long the --on-abort command may run: then its process group gets SIGTERM, SIGKILL --grace later, and the run exits 6")
	fs.DurationVar(&f.wait, "wait", 5*time.Minute, "how long to wait for a held mutex (and transient refusals) before giving up with exit 3")
	fs.DurationVar(&f.grace, "grace", 0, "time from SIGTERM to SIGKILL when the command is stopped; the stop starts this long before the lease's deadline, so the command is gone by then; at most ttl/3 (default ttl/3, at most 10s)")
	fs.StringVar(&f.outcomeFile, "outcome-file", "", "file the outcome is written to (JSON, synced) before the migration mutex is released; when it cannot be written the mutex is left to lapse")
	fs.StringVar(&f.postponeFile, "postpone-flag-file", "", "gh-ost's --postpone-cut-over-flag-file: created before COMMAND starts, removed (the DDL boundary marked first) only while cutting over is safe, once COMMAND ran 'bloodraven deploy postponing' (gh-ost's gh-ost-on-begin-postponed hook); put back when it is no longer safe")
	fs.DurationVar(&f.cutOverBudget, "cut-over-budget", DefaultCutOverBudget, "with --postpone-flag-file: how long the tool's cut-over may take; the leases' deadline and any planned operation must leave at least this; at most ttl/2")
	fs.BoolVar(&f.takeOver, "take-over", false, "take over an operation id that is live under another runner: renew it and wait 120 s before starting the command")
	return cmd
}

// runMain is `run` once its flags are parsed; it returns the exit code.
func runMain(f runFlags, command []string, stdin io.Reader, stdout, stderr io.Writer, clk deployclient.Clock) int {
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
	case f.onAbortTimeout <= 0:
		logf("--on-abort-timeout must be positive (for example 5m): the abort command is bounded")
		return ExitUsage
	case f.postponeFile != "" && (f.cutOverBudget <= 0 || f.cutOverBudget > time.Duration(min(max(f.ttl, 5), 120))*time.Second/2):
		logf("--cut-over-budget %s must be positive and at most half the ttl: the leases' deadline must be able to leave it", f.cutOverBudget)
		return ExitUsage
	case f.postponeFile != "" && !dirExists(filepath.Dir(f.postponeFile)):
		logf("--postpone-flag-file %s: its directory does not exist", f.postponeFile)
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
	// The private directory of the run: the DDL marker and the control
	// socket mark-ddl reaches the run through.
	dir, err := os.MkdirTemp("", "bloodraven-deploy-")
	if err != nil {
		logf("private directory: %v", err)
		return ExitUsage
	}
	defer os.RemoveAll(dir)
	marker := filepath.Join(dir, "ddl-started")

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
		TTL: time.Duration(f.ttl) * time.Second, Wait: f.wait, Clock: clk,
		Progress: func(m string) { logf("%s", m) },
		// The loss is declared a little more than --grace before the
		// deadline (the session caps it at ttl/3), so that SIGTERM, the
		// grace and SIGKILL all fit before the deadline.
		Margin:     f.grace + killSlack,
		TakeOver:   f.takeOver,
		DDLStarted: func() bool { return fileExists(marker) },
	})
	close(acquired)
	<-watcher
	if err != nil {
		logf("could not acquire: %s", explain(err, f.group, f.conn.namespace, f.instance, f.operationID, f.conn.tokenFile, f.wait))
		var acq *deployclient.AcquireError
		if errors.As(err, &acq) && acq.Permanent() {
			logf("this refusal does not change on a retry: exit %d", ExitRefused)
			return ExitRefused
		}
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
		qualified(sess.Namespace(), f.group), f.operationID, sess.Generation(), sess.TTL(), (sess.TTL() / 3).Round(100*time.Millisecond))

	r := &runner{f: f, sess: sess, clk: clk, logf: logf, stdout: stdout, stderr: stderr, dir: dir, marker: marker}
	r.osc.ready = make(chan struct{})
	return r.run(command, stdin, stdout, stderr, sigs)
}

// qualified is namespace/group, or group while the namespace is unknown.
func qualified(namespace, group string) string {
	if namespace == "" {
		return group
	}
	return namespace + "/" + group
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func dirExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

type runner struct {
	f              runFlags
	sess           *deployclient.Session
	clk            deployclient.Clock
	logf           func(string, ...any)
	stdout, stderr io.Writer
	dir, marker    string
	// exitCode is the command's own exit code once it exited; -1 before.
	exitCode int
	// osc is the online-schema-change state: cut-over requests waiting,
	// the postpone file's protocol.
	osc oscState
	// lostStage is the stage authority was lost in; empty when it was not.
	lostStage string
}

func (r *runner) run(command []string, stdin io.Reader, stdout, stderr io.Writer, sigs <-chan os.Signal) int {
	r.exitCode = -1
	// The control socket mark-ddl confirms the boundary through; it lives
	// in the run's private directory (mode 0700).
	ctl, err := net.Listen("unix", filepath.Join(r.dir, "control"))
	if err != nil {
		r.logf("control socket: %v", err)
		return r.finish(ExitChildFailed, "failed", fmt.Sprintf("could not open the control socket: %v", err))
	}
	cctx, stopControl := context.WithCancel(context.Background())
	defer stopControl()
	go serveControl(cctx, ctl, r.answer)

	if !r.sess.Held() {
		r.logf("AUTHORITY LOST before the command started: %v", r.lostErr())
		return r.lost()
	}
	// Its own process group, so that SIGTERM and SIGKILL reach everything it
	// started; on Linux through a supervisor that kills that group (and
	// whatever left it) if this process dies (see proc_*.go).
	if r.f.postponeFile != "" {
		// gh-ost postpones its cut-over while the file exists; it is
		// removed only while cutting over is safe (postpone).
		if err := createPostponeFile(r.f.postponeFile); err != nil {
			r.logf("the postpone flag file: %v", err)
			return r.finish(ExitChildFailed, "failed", fmt.Sprintf("could not create the postpone flag file: %v", err))
		}
		go r.postpone(cctx)
	}
	env := append(r.childEnv(), EnvDDLMarker+"="+r.marker, EnvControl+"="+filepath.Join(r.dir, "control"))
	if r.f.postponeFile != "" {
		env = append(env, EnvPostponeFlagFile+"="+r.f.postponeFile)
	}
	c, err := startChild(command, env, stdin, stdout, stderr, r.logf)
	if err != nil {
		r.logf("could not start %q: %v", commandLine(command), err)
		return r.finish(ExitChildFailed, "failed", fmt.Sprintf("could not start: %v", err))
	}
	pid, exited := c.pid, c.exited
	defer func() { _ = syscall.Kill(-pid, syscall.SIGKILL) }() // whatever happens below
	r.logf("started %q (pid %d); it marks the DDL boundary with 'bloodraven deploy mark-ddl' before its first schema change", commandLine(command), pid)

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
			childErr = stop(r.clk, pid, exited, r.killBy())
			break wait
		case s := <-sigs:
			r.logf("received %s: passing it on to %q", s, commandLine(command))
			_ = syscall.Kill(-pid, s.(syscall.Signal))
		}
	}
	r.exitCode = c.exitCode
	// Whatever the command left running in its group is stopped before any
	// lease is released.
	if !lost {
		stopLeftovers(r.clk, pid, r.f.grace, r.logf)
	}
	stopControl()
	if lost {
		return r.lost()
	}
	// Success (and failure) is decided only by a renewal sent now, after
	// the command ended: the session's own deadlines say nothing about a
	// revocation or a move it has not heard of yet.
	ctx, cancel := context.WithTimeout(context.Background(), confirmTimeout)
	defer cancel()
	if err := r.sess.Confirm(ctx, childErr == nil); err != nil {
		r.logf("AUTHORITY NOT CONFIRMED after the command ended: %v", err)
		return r.lost()
	}
	if childErr != nil {
		r.logf("%q failed: %v", commandLine(command), childErr)
		return r.finish(ExitChildFailed, "failed", childErr.Error())
	}
	r.logf("%q succeeded; authority confirmed after it ended (phase done, topology generation %d)", commandLine(command), r.sess.Generation())
	return r.finish(ExitOK, "succeeded", "")
}

// confirmTimeout bounds the confirming renewal; the session cuts it off at
// the lease's loss moment anyway.
const confirmTimeout = 2 * time.Minute

// markDDL confirms phase ddl with the operator: mark-ddl's answer (its
// command wrote the marker), and the cut-over's once it wrote it.
func (r *runner) markDDL(ctx context.Context) (string, error) {
	err := r.sess.MarkDDL(ctx)
	switch {
	case errors.Is(err, deployclient.ErrPhaseNotRecorded):
		r.logf("DDL boundary marked; %v", err)
		return err.Error(), nil
	case err != nil:
		r.logf("the DDL boundary could not be confirmed: %v", err)
		return "", err
	}
	r.logf("DDL boundary marked and confirmed by the operator (phase ddl)")
	return "", nil
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
func stopLeftovers(clk deployclient.Clock, pid int, grace time.Duration, logf func(string, ...any)) {
	if syscall.Kill(-pid, 0) != nil {
		return // the group is empty
	}
	logf("the command left processes running in its group: SIGTERM, then SIGKILL after %s", grace)
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	for end := clk.Now().Add(grace); clk.Now().Before(end); {
		if syscall.Kill(-pid, 0) != nil {
			return
		}
		t := clk.NewTimer(50 * time.Millisecond)
		<-t.C()
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// killSlack is how long before the confirmed deadline the command gets
// SIGKILL at the latest, against late timers on a loaded machine.
const killSlack = 250 * time.Millisecond

// killBy is when the command gets SIGKILL: --grace from now, and never later
// than killSlack before the earliest confirmed deadline of the two leases.
func (r *runner) killBy() time.Time {
	return killDeadline(r.clk.Now(), r.f.grace, r.sess.Deadline(deployclient.KindMigration), r.sess.Deadline(deployclient.KindFailoverHold))
}

// killDeadline is the moment of SIGKILL: grace after now, and no later than
// killSlack before any of the leases' confirmed deadlines.
func killDeadline(now time.Time, grace time.Duration, deadlines ...time.Time) time.Time {
	by := now.Add(grace)
	for _, d := range deadlines {
		if d.IsZero() {
			continue
		}
		if d = d.Add(-killSlack); d.Before(by) {
			by = d
		}
	}
	return by
}

// stop sends SIGTERM to the command's process group, then SIGKILL at
// killBy, and returns how the command ended.
func stop(clk deployclient.Clock, pid int, exited <-chan error, killBy time.Time) error {
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	t := clk.NewTimer(killBy.Sub(clk.Now()))
	defer t.Stop()
	select {
	case err := <-exited:
		_ = syscall.Kill(-pid, syscall.SIGKILL) // anything it left behind
		return err
	case <-t.C():
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return <-exited
	}
}

// lost handles lost authority: the hold is released first, then the DDL
// boundary decides between the fenced abort and a stop for a person.
func (r *runner) lost() int {
	marker := r.marker
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.sess.ReleaseHold(ctx); err != nil {
		r.logf("the failover-hold could not be released (%v); it lapses at its ttl", err)
	}
	lostErr := r.lostErr()
	r.lostStage = r.stage()
	if fileExists(marker) {
		r.logf("the DDL boundary had been passed: the schema of %s may be partly changed", r.f.instance)
		r.logf("STOP: a person must verify the schema before any retry. Do not reconnect to the new primary to finish the migration. Operation %s will not be granted again.", r.f.operationID)
		r.logf("the operator gates MysqlDatabase %s: new migrations answer 409 verification_required until, once the schema is checked, "+
			"'kubectl annotate mysqldatabase %s bloodraven.shipstream.io/schema-verified=%s' (or 'kubectl bloodraven verify %s %s')",
			r.f.instance, r.f.instance, r.f.operationID, r.f.instance, r.f.operationID)
		return r.finish(ExitLostAfterDDL, "lost-after-ddl", lostErr.Error())
	}
	if r.lostStage == StageAwaitingCutOver {
		r.logf("the DDL boundary was not reached: the tool's cut-over was waiting and nothing was cut over; what the tool built (its shadow table, triggers) stays until a run under its own authority removes it")
	} else {
		r.logf("the DDL boundary was not reached: no schema change was started")
	}
	if r.f.onAbort == "" {
		r.logf("no --on-abort command given: nothing to clean up")
		return r.finish(ExitLostBeforeDDL, "lost-before-ddl", lostErr.Error())
	}
	r.logf("running the fenced abort (at most --on-abort-timeout %s): %s", r.f.onAbortTimeout, r.f.onAbort)
	if err := r.runAbort(lostErr); err != nil {
		r.logf("the abort command failed: %v; clean up by hand before any retry", err)
		return r.finish(ExitAbortFailed, "abort-failed", lostErr.Error())
	}
	r.logf("the abort command succeeded")
	return r.finish(ExitLostBeforeDDL, "lost-before-ddl", lostErr.Error())
}

// runAbort runs --on-abort (sh -c) in its own process group, supervised
// like the command, for at most --on-abort-timeout: then its group gets
// SIGTERM, SIGKILL --grace later, and the abort counts as failed. Whatever
// it leaves running in its group is stopped when it ends.
func (r *runner) runAbort(lostErr error) error {
	env := append(r.childEnv(), EnvLostCause+"="+lostCause(lostErr), EnvLostStage+"="+r.lostStage)
	c, err := startChild([]string{"/bin/sh", "-c", r.f.onAbort}, env, nil, r.stdout, r.stderr, r.logf)
	if err != nil {
		return fmt.Errorf("could not start: %w", err)
	}
	t := r.clk.NewTimer(r.f.onAbortTimeout)
	defer t.Stop()
	select {
	case err = <-c.exited:
		stopLeftovers(r.clk, c.pid, r.f.grace, r.logf)
		return err
	case <-t.C():
		r.logf("the abort command did not end within --on-abort-timeout %s: SIGTERM to its process group, SIGKILL after %s", r.f.onAbortTimeout, r.f.grace)
		_ = stop(r.clk, c.pid, c.exited, r.clk.Now().Add(r.f.grace))
		return fmt.Errorf("did not end within --on-abort-timeout %s; its process group was killed", r.f.onAbortTimeout)
	}
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
	rec := outcome{Group: r.f.group, Namespace: r.sess.Namespace(), Instance: r.f.instance, OperationID: r.f.operationID,
		TopologyGeneration: r.sess.Generation(), Outcome: result, Detail: detail, LostStage: r.lostStage, At: r.clk.Now().UTC().Format(time.RFC3339Nano)}
	if r.exitCode >= 0 {
		code := r.exitCode
		rec.CommandExitCode = &code
	}
	recorded := func(context.Context) error {
		if r.f.outcomeFile == "" {
			return nil
		}
		b, _ := json.MarshalIndent(rec, "", "  ")
		return writeSynced(r.f.outcomeFile, append(b, '\n'))
	}
	r.sess.ReportOutcome(result)
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

// child is a started process (the command, or the --on-abort command) that
// leads its own process group: pid is also the group's id.
type child struct {
	pid int
	// exited receives how it ended, once: nil for exit status 0, else an
	// error that says how (exit status N, signal: ...).
	exited chan error
	// exitCode is its exit code, -1 when a signal ended it or it is not
	// known; set before exited receives.
	exitCode int
}

// startDirect starts argv itself in its own process group (childAttr),
// and waits for it on a goroutine locked to its thread until it has
// exited: a parent-death signal fires when the thread that started the
// process ends.
func startDirect(argv, env []string, stdin io.Reader, stdout, stderr io.Writer) (*child, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.Env = env
	cmd.SysProcAttr = childAttr()
	c := &child{exited: make(chan error, 1), exitCode: -1}
	err := startOnLockedThread(cmd, func(err error) {
		if cmd.ProcessState != nil {
			c.exitCode = cmd.ProcessState.ExitCode()
		}
		c.exited <- err
	})
	if err != nil {
		return nil, err
	}
	c.pid = cmd.Process.Pid
	return c, nil
}

// startOnLockedThread starts cmd from a goroutine locked to its thread and
// waits for it there: a parent-death signal (Pdeathsig) fires when the
// thread that started the process ends, so the thread lives until the
// process has exited. ended gets Wait's error on that goroutine. The
// error is Start's.
func startOnLockedThread(cmd *exec.Cmd, ended func(error)) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		ended(cmd.Wait())
	}()
	return <-started
}
