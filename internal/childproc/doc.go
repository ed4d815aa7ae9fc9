// Package childproc makes the processes a test or the playground starts
// (kube-apiserver, etcd, mariadbd, the operator) die with the process that
// started them, even when it panics or is killed with SIGKILL.
//
// Linux sends a child its parent-death signal (Pdeathsig) when the OS thread
// that forked it exits, not when the process does. The Go runtime retires a
// thread whenever a goroutine locked to it ends, so a child started from an
// arbitrary goroutine could be signalled at a random moment. Do runs every
// start on one goroutine locked to its thread for the life of the process:
// the signal then fires when, and only when, the process ends.
//
// Wrap gives the same protection to binaries started by code we do not own
// (envtest): it writes a launcher that sets the signal with setpriv(1) from
// util-linux (Essential on Debian) and execs the binary.
//
// Not covered: grandchildren (each child must arrange its own), and a child
// that changes its credentials, which loses the signal.
package childproc
