package childproc

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Stop pauses pid (SIGSTOP) and returns once every thread of it is stopped,
// or an error after within.
//
// kill(2) returns before the stop has happened: the kernel marks one thread
// to carry out the group stop, and until that thread is scheduled the others
// run on. A paused MariaDB server on a loaded machine went on answering
// queries for seconds after kill returned, so a test that pauses a site and
// then probes it must wait for the stop itself.
func Stop(pid int, within time.Duration) error {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("childproc: SIGSTOP %d: %w", pid, err)
	}
	deadline := time.Now().Add(within)
	for {
		running, err := runningThreads(pid)
		if err != nil {
			return err
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("childproc: %d of process %d's threads not stopped %s after SIGSTOP", running, pid, within)
		}
		time.Sleep(time.Millisecond)
	}
}

// runningThreads counts pid's threads that are not stopped ('T', or 't'
// under a tracer) or dead.
func runningThreads(pid int) (int, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("childproc: threads of %d: %w", pid, err)
	}
	n := 0
	for _, e := range tasks {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		state, _, ok := stat(pid, tid)
		if !ok {
			continue // the thread ended
		}
		switch state {
		case "T", "t", "Z", "X":
		default:
			n++
		}
	}
	return n, nil
}
