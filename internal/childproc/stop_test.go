package childproc

import (
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const envSpin = "BLOODRAVEN_CHILDPROC_SPIN"

// Stop returns only when no thread of the process runs any more: checked
// on a child whose eight threads all spin on two cores, where a bare
// SIGSTOP leaves threads running after kill(2) returned.
func TestStopReturnsOnlyWhenEveryThreadIsStopped(t *testing.T) {
	if os.Getenv(envSpin) != "" {
		runtime.GOMAXPROCS(8)
		for i := 0; i < 8; i++ {
			go func() {
				var n atomic.Int64
				for {
					n.Add(1)
				}
			}()
		}
		select {}
	}
	for i := 0; i < 20; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStopReturnsOnlyWhenEveryThreadIsStopped$")
		cmd.Env = append(os.Environ(), envSpin+"=1")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		// Wait until the spinners run: a stop is then racing them.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			if n, err := runningThreads(pid); err == nil && n >= 8 {
				break
			}
			if time.Now().After(deadline) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				_ = cmd.Wait()
				t.Fatal("the child's spinning threads never ran")
			}
		}
		err := Stop(pid, 10*time.Second)
		running, rerr := runningThreads(pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if err != nil || rerr != nil {
			t.Fatal(err, rerr)
		}
		if running != 0 {
			t.Fatalf("attempt %d: %d threads still running after Stop returned", i, running)
		}
	}
}
