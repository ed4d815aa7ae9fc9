package deploycmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/shipstream/bloodraven/deployclient"
	"github.com/shipstream/bloodraven/deployclient/wire"
)

// Online schema changes (docs/online-schema-change.md): a tool such as
// pt-online-schema-change or gh-ost copies a table for hours and then cuts
// over with one RENAME. The copy leaves the original table untouched, so
// its DDL boundary is the cut-over. `cut-over` (the tool's cut-over hook)
// waits until cutting over is safe, marks the boundary and lets the tool
// go on; `run --postpone-flag-file` does the same through gh-ost's postpone
// file, once `postponing` (gh-ost's on-begin-postponed hook) said the copy
// is complete.

// Stages a run was lost in (EnvLostStage, the outcome's lostStage).
const (
	// StageCopy: before the DDL boundary, no cut-over asked for yet: an
	// online schema change's copy. Nothing but the tool's own objects
	// changed.
	StageCopy = "pre-ddl"
	// StageAwaitingCutOver: the tool's copy was complete and it had asked
	// to cut over (or was postponing); nothing was cut over.
	StageAwaitingCutOver = "awaiting-cut-over"
	// StageDDL: at or after the DDL boundary (the cut-over was allowed).
	StageDDL = "ddl"
)

// EnvLostStage is given to the abort command: the stage the run was lost
// in (pre-ddl or awaiting-cut-over; the abort runs only before the DDL
// boundary).
const EnvLostStage = "BLOODRAVEN_LOST_STAGE"

// EnvPostponeFlagFile is given to the command of a run with
// --postpone-flag-file: the file's path, for gh-ost's
// --postpone-cut-over-flag-file.
const EnvPostponeFlagFile = "BLOODRAVEN_POSTPONE_FLAG_FILE"

// lostWhileWaiting begins the run's answer to a cut-over request when a
// lease was lost while it waited: `cut-over` then exits 4.
const lostWhileWaiting = "authority lost while the cut-over waited"

// DefaultCutOverBudget is the default of `cut-over --budget` and `run
// --cut-over-budget`: how long a tool's cut-over may take.
const DefaultCutOverBudget = wire.DefaultCutOverMargin

// oscState is a run's online-schema-change state.
type oscState struct {
	mu sync.Mutex
	// asked: the tool's copy is complete and it asked to cut over (or
	// announced it waits on the postpone file).
	asked     bool
	ready     chan struct{} // closed by the first postponing request
	readyOnce sync.Once
}

// stage is the stage of the run now, given whether the DDL marker exists.
func (r *runner) stage() string {
	if fileExists(r.marker) {
		return StageDDL
	}
	r.osc.mu.Lock()
	defer r.osc.mu.Unlock()
	if r.osc.asked {
		return StageAwaitingCutOver
	}
	return StageCopy
}

// answer answers one request on the control socket.
func (r *runner) answer(ctx context.Context, request string) (string, error) {
	fields := strings.Fields(request)
	if len(fields) == 0 {
		return "", errors.New("empty request")
	}
	switch fields[0] {
	case "mark-ddl":
		return r.markDDL(ctx)
	case "cut-over":
		if len(fields) != 3 {
			return "", errors.New("cut-over needs a budget and a timeout")
		}
		budget, err1 := strconv.ParseInt(fields[1], 10, 64)
		timeout, err2 := strconv.ParseInt(fields[2], 10, 64)
		if err1 != nil || err2 != nil || budget <= 0 || timeout <= 0 {
			return "", fmt.Errorf("bad cut-over request %q", request)
		}
		return "", r.cutOver(ctx, time.Duration(budget)*time.Millisecond, time.Duration(timeout)*time.Millisecond)
	case "postponing":
		if r.f.postponeFile == "" {
			return "", errors.New("this run has no --postpone-flag-file: nothing waits on a postpone file")
		}
		r.osc.mu.Lock()
		r.osc.asked = true
		r.osc.mu.Unlock()
		r.osc.readyOnce.Do(func() { close(r.osc.ready) })
		r.logf("the tool's copy is complete and it postpones its cut-over on %s: the file is removed once cutting over is safe", r.f.postponeFile)
		return "", nil
	}
	return "", errors.New("unknown request")
}

// maxCutOverBudget is the largest budget the run's ttl allows: the leases
// are renewed every ttl/3, so their confirmed deadline is at least 2/3 of
// the ttl away while renewals succeed; half the ttl leaves room for a late
// one.
func (r *runner) maxCutOverBudget() time.Duration { return r.sess.TTL() / 2 }

// cutOver answers a cut-over request: it waits until cutting over is safe
// (deployclient.DecideCutOver) for at most timeout, then marks the DDL
// boundary. An error means the tool must not cut over.
func (r *runner) cutOver(ctx context.Context, budget, timeout time.Duration) error {
	if limit := r.maxCutOverBudget(); budget > limit {
		return fmt.Errorf("--budget %s is more than half the run's ttl (%s): the leases' deadline could never leave it; raise the run's --ttl or lower --budget", budget, r.sess.TTL())
	}
	r.osc.mu.Lock()
	r.osc.asked = true
	r.osc.mu.Unlock()
	r.logf("the tool asks to cut over (budget %s, waiting up to %s)", budget, timeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := r.sess.WaitCutOver(ctx, budget, func(d deployclient.CutOverDecision) {
		r.logf("cut-over not allowed yet: %s: %s", d.Reason, d.Message)
	})
	var refused *deployclient.CutOverRefusedError
	switch {
	case errors.As(err, &refused):
		r.logf("%v: the tool must not cut over", err)
		return err
	case err != nil:
		r.logf("%s: %v", lostWhileWaiting, err)
		return fmt.Errorf("%s: %w", lostWhileWaiting, err)
	}
	if _, err := r.markBoundary(ctx); err != nil {
		return err
	}
	r.logf("cut-over allowed: the DDL boundary is marked and confirmed; the tool cuts over now")
	return nil
}

// markBoundary writes the DDL marker (from here on a loss is decided as
// after the boundary, the cautious side) and confirms phase ddl with the
// operator.
func (r *runner) markBoundary(ctx context.Context) (string, error) {
	if err := writeSynced(r.marker, []byte(r.clk.Now().UTC().Format(time.RFC3339Nano)+"\n")); err != nil {
		return "", fmt.Errorf("the DDL marker: %w", err)
	}
	return r.markDDL(ctx)
}

// postpone runs gh-ost's postpone-file protocol until ctx ends (the
// command exited): once the tool said it is postponing, the file is
// removed only while cutting over is safe, the DDL boundary marked and
// confirmed first, and put back when it is no longer safe.
func (r *runner) postpone(ctx context.Context) {
	select {
	case <-r.osc.ready:
	case <-ctx.Done():
		return
	}
	budget := r.f.cutOverBudget
	var last deployclient.CutOverDecision
	for {
		d := r.sess.CheckCutOver(ctx, budget)
		if ctx.Err() != nil {
			return
		}
		present := fileExists(r.f.postponeFile)
		switch {
		case d.Allowed && present:
			if !fileExists(r.marker) {
				if _, err := r.markBoundary(ctx); err != nil {
					r.logf("the postpone file stays: %v", err)
					break
				}
			}
			if err := os.Remove(r.f.postponeFile); err != nil && !os.IsNotExist(err) {
				r.logf("could not remove the postpone file: %v", err)
				break
			}
			r.logf("cut-over allowed: the DDL boundary is marked and confirmed, and %s is removed", r.f.postponeFile)
		case !d.Allowed && !present:
			if err := createPostponeFile(r.f.postponeFile); err != nil {
				r.logf("COULD NOT PUT BACK the postpone file (%v) although cutting over is not safe: %s: %s", err, d.Reason, d.Message)
				break
			}
			r.logf("cutting over is no longer safe (%s: %s): %s is back", d.Reason, d.Message, r.f.postponeFile)
		case !d.Allowed && (d.Reason != last.Reason || d.Message != last.Message):
			r.logf("cut-over not allowed yet: %s: %s", d.Reason, d.Message)
		}
		last = d
		if !sleepCtx(r.clk, deployclient.CutOverPoll, ctx) {
			return
		}
	}
}

// createPostponeFile creates gh-ost's postpone flag file.
func createPostponeFile(path string) error {
	return writeSynced(path, []byte("bloodraven-deploy run: the cut-over waits until it is safe\n"))
}

func sleepCtx(clk deployclient.Clock, d time.Duration, ctx context.Context) bool {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// cutOverCommand is `cut-over`, run by an online-schema-change tool's
// cut-over hook inside a run.
func cutOverCommand(stderr io.Writer, getenv func(string) string) *cobra.Command {
	var budget, timeout time.Duration
	cmd := &cobra.Command{
		Use:   "cut-over",
		Short: "Inside a run: wait until an online schema change may cut over, mark the DDL boundary, exit 0",
		Long: `Run by an online-schema-change tool's cut-over hook (pt-online-schema-change's before_swap_tables,
gh-ost's gh-ost-on-before-cut-over) inside 'run'. It waits until cutting over is safe: the group is
stable at the run's grant generation, no planned operation is in flight or due within --budget, and
the leases' confirmed deadline leaves --budget. Then it marks the DDL boundary, confirmed by the
operator, and exits 0: the tool cuts over now.

Exit codes: 0 cut over now; 1 not allowed within --timeout, or the boundary was not confirmed;
2 usage (outside a run); 4 authority was lost while it waited. On any non-zero exit the tool must
abort before its cut-over.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fail := func(code int, format string, a ...any) error {
				fmt.Fprintf(stderr, "bloodraven deploy cut-over: "+format+"\n", a...)
				return exitCode(code)
			}
			sock := getenv(EnvControl)
			switch {
			case sock == "":
				return fail(ExitUsage, "%s is not set: run this inside 'bloodraven deploy run -- ...' (the tool's cut-over hook); do not cut over", EnvControl)
			case budget <= 0 || timeout <= 0:
				return fail(ExitUsage, "--budget and --timeout must be positive")
			}
			fmt.Fprintf(stderr, "bloodraven deploy cut-over: waiting until cutting over is safe (budget %s, at most %s)\n", budget, timeout)
			_, err := askRun(sock, fmt.Sprintf("cut-over %d %d", budget.Milliseconds(), timeout.Milliseconds()), timeout+time.Minute)
			switch {
			case err != nil && strings.HasPrefix(err.Error(), lostWhileWaiting):
				return fail(ExitLostBeforeDDL, "%v; do not cut over", err)
			case err != nil:
				return fail(1, "%v; do not cut over", err)
			}
			fmt.Fprintln(stderr, "bloodraven deploy cut-over: allowed; the DDL boundary is marked: cut over now")
			return nil
		},
	}
	cmd.Flags().DurationVar(&budget, "budget", DefaultCutOverBudget, "how long the tool's cut-over may take: the leases' deadline and any planned operation must leave at least this; at most half the run's ttl")
	cmd.Flags().DurationVar(&timeout, "timeout", time.Hour, "how long to wait for a safe moment before giving up (exit 1)")
	return cmd
}

// postponingCommand is `postponing`, gh-ost's gh-ost-on-begin-postponed
// hook inside a run with --postpone-flag-file.
func postponingCommand(stderr io.Writer, getenv func(string) string) *cobra.Command {
	return &cobra.Command{
		Use:   "postponing",
		Short: "Inside a run with --postpone-flag-file: the tool's copy is complete and it waits on the postpone file",
		Long: `gh-ost's gh-ost-on-begin-postponed hook: it tells the run that the copy is complete and that the tool
postpones its cut-over while the postpone flag file exists. From then on the run removes the file only
while cutting over is safe (marking the DDL boundary first) and puts it back when it is not. It
returns at once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sock := getenv(EnvControl)
			if sock == "" {
				fmt.Fprintf(stderr, "bloodraven deploy postponing: %s is not set: run this inside 'bloodraven deploy run --postpone-flag-file ... -- ...'\n", EnvControl)
				return exitCode(ExitUsage)
			}
			if _, err := askRun(sock, "postponing", 30*time.Second); err != nil {
				fmt.Fprintf(stderr, "bloodraven deploy postponing: %v\n", err)
				return exitCode(1)
			}
			return nil
		},
	}
}
