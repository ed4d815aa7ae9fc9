package deploycmd

import "syscall"

// childAttr: the command's own process group, so that SIGTERM and SIGKILL
// reach everything it started; and SIGKILL if this process dies
// (Pdeathsig), so that a run killed outright does not leave the command
// running unfenced.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
