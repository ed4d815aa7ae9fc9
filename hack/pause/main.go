// Command pause is the node's Pod sandbox process (make cluster): it holds
// a Pod's namespaces and does nothing else. It reaps any child that is
// re-parented to it and exits 0 on SIGTERM or SIGINT, as Kubernetes'
// build/pause/linux/pause.c does; it is built here because no registry is
// reachable. -v prints its version.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const version = "3.10"

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-v" || os.Args[1] == "--version") {
		fmt.Println("pause (bloodraven-node) " + version)
		return
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
