//go:build !linux

package deploycmd

import "syscall"

// childAttr: the command's own process group. Only Linux has a
// parent-death signal: elsewhere (macOS) a run killed outright (SIGKILL)
// leaves the command running until it ends by itself. That is a documented
// best effort; in a Pod, the container's end kills every process anyway.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
