//go:build !linux

package deploycmd

import (
	"io"
	"syscall"
)

// childAttr: the command's own process group. Only Linux has a
// parent-death signal: elsewhere (macOS) a run killed outright (SIGKILL)
// leaves the command running until it ends by itself. That is a documented
// best effort; in a Pod, the container's end kills every process anyway.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// startChild starts argv in its own process group. There is no supervisor
// outside Linux (no child subreaper, no parent-death signal): see childAttr.
func startChild(argv, env []string, stdin io.Reader, stdout, stderr io.Writer, _ func(string, ...any)) (*child, error) {
	return startDirect(argv, env, stdin, stdout, stderr)
}
