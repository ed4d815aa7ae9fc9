package deploycmd

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// processGone: no such process, or one that ended and waits to be reaped.
func processGone(pid int) bool {
	if syscall.Kill(pid, 0) == syscall.ESRCH {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// readPids reads the pids a command recorded, one a line.
func readPids(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, l := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(l)
		if err != nil {
			t.Fatalf("%s: %q is not a pid", path, l)
		}
		pids = append(pids, pid)
	}
	return pids
}

func waitForFile(t *testing.T, path string, within time.Duration) {
	t.Helper()
	for end := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s never appeared", path)
		}
	}
}

// killRecorded SIGKILLs every pid recorded in path (the test's own
// cleanup, whatever the run left).
func killRecorded(path string) {
	b, _ := os.ReadFile(path)
	for _, l := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(l); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// A run killed outright (SIGKILL: no handler of it runs) leaves nothing its
// command started running: not the command, not its background jobs in its
// process group, not a job that left the group (setsid), not a daemon that
// double-forked away from its parent. SIGKILL as the command's parent-death
// signal alone kills only the command itself.
func TestAKilledRunLeavesNoProcessOfItsCommand(t *testing.T) {
	cases := []struct {
		name string
		// script records the pids to check in $1/pids, one a line, then
		// creates $1/ready.
		script string
		needs  string
	}{
		{
			name:   "the command and its background jobs in its group",
			script: `sleep 300 & echo $! >> "$1/pids"; sleep 300 & echo $! >> "$1/pids"; echo $$ >> "$1/pids"; : > "$1/ready"; wait`,
		},
		{
			name: "a job that left the command's group",
			script: `setsid sh -c 'echo $$ >> "$0/pids"; exec sleep 300' "$1" & sh -c 'echo $$ >> "$0/pids"; exec sleep 300' "$1" & echo $$ >> "$1/pids"; ` +
				`while [ "$(wc -l < "$1/pids")" -lt 3 ]; do sleep 0.05; done; : > "$1/ready"; wait`,
			needs: "setsid",
		},
		{
			name: "a daemon that double-forked out of the group",
			script: `(setsid sh -c 'echo $$ >> "$0/pids"; exec sleep 300' "$1" &); ` +
				`while [ ! -s "$1/pids" ]; do sleep 0.05; done; echo $$ >> "$1/pids"; : > "$1/ready"; exec sleep 300`,
			needs: "setsid",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needs != "" {
				if _, err := exec.LookPath(tc.needs); err != nil {
					t.Skipf("no %s here", tc.needs)
				}
			}
			conn, dir := serveCLI(t, &cliAPI{})
			work := t.TempDir()
			pidsFile := filepath.Join(work, "pids")
			t.Cleanup(func() { killRecorded(pidsFile) })
			out, err := os.Create(filepath.Join(dir, "cli.out"))
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			args := append([]string{"run"}, conn...)
			args = append(args, "--group", "g", "--instance", "db", "--ttl", "30", "--", "sh", "-c", tc.script, "sh", work)
			cli := exec.Command(os.Args[0], args...)
			cli.Env = append(os.Environ(), asCLI+"=1")
			cli.Stdout, cli.Stderr = out, out
			if err := cli.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cli.Process.Kill(); _ = cli.Wait() })
			waitForFile(t, filepath.Join(work, "ready"), 20*time.Second)
			pids := readPids(t, pidsFile)
			for _, pid := range pids {
				if processGone(pid) {
					t.Fatalf("pid %d is gone before the run was killed", pid)
				}
			}
			if err := cli.Process.Kill(); err != nil { // SIGKILL
				t.Fatal(err)
			}
			_ = cli.Wait()
			deadline := time.Now().Add(5 * time.Second)
			for _, pid := range pids {
				for !processGone(pid) {
					if time.Now().After(deadline) {
						log, _ := os.ReadFile(out.Name())
						t.Fatalf("pid %d (of %v) still runs 5 s after its run was killed; the run said:\n%s", pid, pids, log)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
}

// revokeWhenReady is the deployment API of cliAPI until the file ready
// exists (the command created it); from then on every renewal and watch of
// a lease answers 409 revoked, so the run loses authority while its
// command runs, before the DDL boundary.
type revokeWhenReady struct {
	api   *cliAPI
	ready string
}

func (h *revokeWhenReady) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, err := os.Stat(h.ready); err == nil && strings.Contains(r.URL.Path, "/leases/") && r.Method != http.MethodDelete {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error":"revoked","reason":"operator_revoked","topologyGeneration":2}`))
		return
	}
	h.api.ServeHTTP(w, r)
}

// --on-abort is bounded by --on-abort-timeout: an abort still running then
// has its process group killed (SIGTERM, SIGKILL --grace later; an abort
// that ignores SIGTERM too), and the run exits 6 (--on-abort failed). An
// abort that ends in time decides as before: 4 when it succeeded, 6 when
// it failed.
func TestAnAbortThatOutlivesItsTimeoutIsKilledAndTheRunExits6(t *testing.T) {
	cases := []struct {
		name  string
		abort string // $A is the scratch directory
		want  int
		// recorded: the abort records its pid in $A/abort.pid; it must be
		// gone when the run has ended.
		recorded bool
	}{
		{"an abort that hangs", `echo $$ > "$A/abort.pid"; sleep 300 & echo $! >> "$A/abort.pid"; wait`, ExitAbortFailed, true},
		{"an abort that ignores SIGTERM", `trap "" TERM; echo $$ > "$A/abort.pid"; while :; do sleep 0.1; done`, ExitAbortFailed, true},
		{"an abort that succeeds in time", `true`, ExitLostBeforeDDL, false},
		{"an abort that fails in time", `exit 3`, ExitAbortFailed, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			ready := filepath.Join(work, "ready")
			pidFile := filepath.Join(work, "abort.pid")
			t.Cleanup(func() { killRecorded(pidFile) })
			conn, _ := serveCLIHandler(t, &revokeWhenReady{api: &cliAPI{}, ready: ready})
			abort := "A=" + shellQuote(work) + "; " + tc.abort
			args := append([]string{"run"}, conn...)
			args = append(args, "--group", "g", "--instance", "db", "--ttl", "6", "--grace", "1s",
				"--on-abort", abort, "--on-abort-timeout", "1s", "--", "sh", "-c", `: > "$0"; exec sleep 300`, ready)
			var stdout, stderr syncBuilder
			done := make(chan int, 1)
			start := time.Now()
			go func() { done <- Run("bloodraven-deploy", args, strings.NewReader(""), &stdout, &stderr, env(nil)) }()
			var code int
			select {
			case code = <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("the run did not end within 30 s (--on-abort-timeout 1s):\n%s", stderr.String())
			}
			if code != tc.want {
				t.Fatalf("exit %d after %s, want %d:\n%s", code, time.Since(start).Round(time.Millisecond), tc.want, stderr.String())
			}
			if tc.recorded {
				if !strings.Contains(stderr.String(), "--on-abort-timeout 1s") {
					t.Errorf("the run does not say that the abort ran out of time:\n%s", stderr.String())
				}
				for _, pid := range readPids(t, pidFile) {
					if !processGone(pid) {
						t.Errorf("pid %d of the abort still runs after the run ended", pid)
					}
				}
			}
		})
	}
}

// The supervisor reports how the command ended as exec.Cmd.Wait would (exit
// status, signal), and a command that cannot start as an error.
func TestTheSupervisorReportsHowTheCommandEnded(t *testing.T) {
	// Executable, but no program: it passes the run's look-up, and the
	// supervisor's exec fails.
	notAProgram := filepath.Join(t.TempDir(), "not-a-program")
	if err := os.WriteFile(notAProgram, []byte{0, 1, 2, 3}, 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		argv     []string
		startErr string
		wantErr  string
		wantCode int
	}{
		{"success", []string{"sh", "-c", "read x; [ \"$x\" = in ]"}, "", "", 0},
		{"an exit status", []string{"sh", "-c", "exit 3"}, "", "exit status 3", 3},
		{"a signal", []string{"sh", "-c", "kill -TERM $$"}, "", "signal: terminated", -1},
		{"not found", []string{"no-such-command-here"}, "executable file not found", "", 0},
		{"not executable", []string{"/dev/null"}, "permission denied", "", 0},
		{"not a program", []string{notAProgram}, "exec format error", "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logged syncBuilder
			logf := func(f string, a ...any) { _, _ = logged.Write([]byte(f + "\n")) }
			c, err := startChild(tc.argv, os.Environ(), strings.NewReader("in\n"), io.Discard, io.Discard, logf)
			if logged.String() != "" {
				t.Errorf("the supervisor was not used: %s", logged.String())
			}
			if tc.startErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.startErr) {
					t.Fatalf("start: %v, want %q", err, tc.startErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got error
			select {
			case got = <-c.exited:
			case <-time.After(10 * time.Second):
				t.Fatal("no end reported")
			}
			if (got == nil) != (tc.wantErr == "") || got != nil && got.Error() != tc.wantErr || c.exitCode != tc.wantCode {
				t.Fatalf("ended with %v (code %d), want %q (code %d)", got, c.exitCode, tc.wantErr, tc.wantCode)
			}
		})
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
