package deploycmd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// On Linux the command (and the --on-abort command) is started through a
// supervisor: this binary again, re-executed through /proc/self/exe with
// superviseArg as its first argument (init below dispatches it before
// anything else runs, in every binary that links this package: the
// bloodraven-deploy CLI, the operator's `bloodraven deploy`, and the test
// binaries). The supervisor
//
//   - is a child subreaper (PR_SET_CHILD_SUBREAPER), so every process the
//     command starts stays its descendant, even one that leaves the
//     command's process group (setsid) and whose parent ends;
//   - runs the command in a process group of its own, whose id it reports
//     to the run (the run signals that group, as before), and reports the
//     command's wait status when it ends;
//   - lives in a process group of its own too, so a signal to the run's
//     group (a CI runner killing its job) does not reach it, and stays
//     until it has no descendant left;
//   - learns that the run is gone when its end of a pipe the run holds
//     reads EOF (the kernel closes it however the run died, SIGKILL
//     included), or by its parent-death signal, SIGTERM, which it catches.
//     Then it SIGKILLs the command's group and every descendant it has,
//     again and again until none is left, and exits.
//
// A parent-death signal alone (SIGKILL) kills only the direct child; its
// own children, in its group or not, would outlive a SIGKILLed run.

// superviseArg is the first argument of the supervisor mode:
// <binary> superviseArg <run's pid> <path> <argv...>.
const superviseArg = "__bloodraven-deploy-supervise"

// Descriptors the supervisor gets besides stdin, stdout and stderr.
const (
	// supervisorReportFD: the supervisor writes "pid N" (the command's pid
	// and process group) or "error MSG" (the command did not start), then
	// "exit W" (its raw wait status) when it ended.
	supervisorReportFD = 3
	// supervisorLifeFD: the read end of a pipe whose only write end the run
	// holds: EOF means the run is gone.
	supervisorLifeFD = 4
)

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER (Linux 3.4).
const prSetChildSubreaper = 36

func init() {
	if len(os.Args) >= 5 && os.Args[1] == superviseArg {
		os.Exit(supervise(os.Args[2], os.Args[3], os.Args[4:]))
	}
}

// childAttr: the command's own process group, so that SIGTERM and SIGKILL
// reach everything it started; and SIGKILL if its parent dies (Pdeathsig).
// The supervisor starts the command so; without a supervisor (the
// fallback) the run does.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// errNoSupervisor: the supervisor could not be started at all.
var errNoSupervisor = errors.New("the supervisor could not be started")

// startChild starts argv in its own process group under a supervisor. When
// the supervisor itself cannot be started (no /proc, say), argv is started
// directly with SIGKILL as its parent-death signal, and logf says what is
// lost: a run killed outright then kills the command, not what it started.
func startChild(argv, env []string, stdin io.Reader, stdout, stderr io.Writer, logf func(string, ...any)) (*child, error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, err
	}
	c, err := startSupervised(path, argv, env, stdin, stdout, stderr)
	if errors.Is(err, errNoSupervisor) {
		logf("%v: %q runs without it; if this run is killed outright, what it started may keep running", err, commandLine(argv))
		return startDirect(argv, env, stdin, stdout, stderr)
	}
	return c, err
}

func startSupervised(path string, argv, env []string, stdin io.Reader, stdout, stderr io.Writer) (*child, error) {
	reportR, reportW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", errNoSupervisor, err)
	}
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		reportR.Close()
		reportW.Close()
		return nil, fmt.Errorf("%w (%v)", errNoSupervisor, err)
	}
	cmd := exec.Command("/proc/self/exe", append([]string{superviseArg, strconv.Itoa(os.Getpid()), path}, argv...)...)
	cmd.Args[0] = os.Args[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{reportW, lifeR} // fds 3 and 4
	// SIGTERM when the thread that started it ends (below, locked until
	// the supervisor ended): it is caught, and means "the run is gone".
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	ended := make(chan error, 1)
	err = startOnLockedThread(cmd, func(err error) {
		ended <- err
		lifeW.Close() // only now: while it is open, the supervisor knows the run lives
	})
	reportW.Close()
	lifeR.Close()
	if err != nil {
		reportR.Close()
		lifeW.Close()
		return nil, fmt.Errorf("%w (%v)", errNoSupervisor, err)
	}
	rd := bufio.NewReader(reportR)
	line, _ := rd.ReadString('\n')
	word, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
	pid, perr := strconv.Atoi(rest)
	switch {
	case word == "pid" && perr == nil && pid > 0:
	case word == "error":
		reportR.Close()
		<-ended
		return nil, errors.New(rest)
	default:
		reportR.Close()
		return nil, fmt.Errorf("the supervisor ended before it started the command (%v)", <-ended)
	}
	c := &child{pid: pid, exited: make(chan error, 1), exitCode: -1}
	go func() {
		defer reportR.Close()
		line, _ := rd.ReadString('\n')
		word, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		if w, err := strconv.ParseUint(rest, 10, 32); word == "exit" && err == nil {
			ws := syscall.WaitStatus(w)
			if ws.Exited() {
				c.exitCode = ws.ExitStatus()
			}
			c.exited <- waitError(ws)
			return
		}
		// No report: the supervisor was killed, and the command with it
		// (its parent-death signal is SIGKILL).
		c.exited <- fmt.Errorf("the command's supervisor ended without reporting how the command ended (%v)", <-ended)
	}()
	return c, nil
}

// waitError says how a process ended, as exec.Cmd.Wait would: nil for exit
// status 0, else "exit status N" or "signal: NAME".
func waitError(ws syscall.WaitStatus) error {
	var s string
	switch {
	case ws.Exited() && ws.ExitStatus() == 0:
		return nil
	case ws.Exited():
		s = "exit status " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled():
		s = "signal: " + ws.Signal().String()
	default:
		s = fmt.Sprintf("wait status %#x", uint32(ws))
	}
	if ws.CoreDump() {
		s += " (core dumped)"
	}
	return errors.New(s)
}

// supervise is the supervisor: it runs path (argv) for the run whose pid
// is parentArg and returns its own exit code (0 once nothing it supervises
// is left; what the command's ended with is in the report).
func supervise(parentArg, path string, argv []string) int {
	report := os.NewFile(supervisorReportFD, "report")
	life := os.NewFile(supervisorLifeFD, "life")
	// Neither goes to the command: a copy of the life pipe's end would be
	// harmless, one of the report's would keep the run from reading EOF.
	syscall.CloseOnExec(supervisorReportFD)
	syscall.CloseOnExec(supervisorLifeFD)
	fail := func(format string, a ...any) int {
		fmt.Fprintf(report, "error "+format+"\n", a...)
		report.Close()
		return 127
	}
	parent, err := strconv.Atoi(parentArg)
	if err != nil {
		return fail("bad run pid %q", parentArg)
	}
	// The parent-death signal is SIGTERM. Caught from here on; before,
	// SIGTERM ends the supervisor before it started anything.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	if os.Getppid() != parent {
		return fail("the run (pid %d) is gone", parent)
	}
	// Best effort: without it (a kernel before 3.4), the command's group
	// is still killed when the run dies, but not what left it.
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	// The command's parent-death signal fires when this thread ends.
	runtime.LockOSThread()
	p, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   childAttr(),
	})
	if err != nil {
		return fail("%v", err)
	}
	pgid := p.Pid
	fmt.Fprintf(report, "pid %d\n", pgid)

	// The reaper: every descendant that ends is this process's child by
	// then (a subreaper's). The command's status is reported; ECHILD means
	// nothing is left, for good (only a descendant could add a child).
	exited, allGone := make(chan syscall.WaitStatus, 1), make(chan struct{})
	// reaped: the command's pid may be anyone's from now on (once its group
	// is empty too), so its group is no longer signalled as a whole.
	var reaped atomic.Bool
	go func() {
		defer close(allGone)
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, 0, nil)
			switch {
			case err == syscall.EINTR:
			case err != nil:
				return
			case pid == pgid:
				reaped.Store(true)
				exited <- ws
			}
		}
	}()
	runGone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, life)
		close(runGone)
	}()
	reported := false
	reportExit := func(ws syscall.WaitStatus) {
		fmt.Fprintf(report, "exit %d\n", uint32(ws))
		report.Close()
		reported = true
	}
	for {
		select {
		case ws := <-exited:
			reportExit(ws)
		case <-allGone:
			if !reported {
				select {
				case ws := <-exited:
					reportExit(ws)
				default:
				}
			}
			return 0
		case <-runGone:
			killAll(pgid, &reaped, allGone)
			return 0
		case s := <-sigs:
			if os.Getppid() != parent {
				killAll(pgid, &reaped, allGone)
				return 0
			}
			// Sent to the supervisor itself while the run lives: pass it on.
			if !reaped.Load() {
				_ = syscall.Kill(-pgid, s.(syscall.Signal))
			}
		}
	}
}

// killAll SIGKILLs the command's process group and every live child of
// this process (a subreaper: whatever left the group, or lost its parent,
// comes here as its parent dies), again and again, until the reaper found
// nothing left or 10 s passed. Once the command was reaped its group is
// not signalled as a whole (its id may be reused once the group is empty):
// its members are this process's descendants, killed a generation a round.
func killAll(pgid int, reaped *atomic.Bool, allGone <-chan struct{}) {
	self := os.Getpid()
	deadline := time.After(10 * time.Second)
	for {
		if !reaped.Load() {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		for _, pid := range liveChildren(self) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case <-allGone:
			return
		case <-deadline:
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// liveChildren lists the processes whose parent is ppid and that have not
// ended (zombies left out), from /proc.
func liveChildren(ppid int) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	var out []int
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + n + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold anything, so parse after
		// its last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil && pp == ppid {
			out = append(out, pid)
		}
	}
	return out
}
