// Command kubectl-bloodraven is the kubectl plugin for the people on call
// (package kubectlplugin): put it on PATH and run `kubectl bloodraven`.
// Put kubectl_complete-bloodraven (beside this file) on PATH too, and
// kubectl completes the plugin's commands, groups, databases and sites.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/shipstream/bloodraven"
	"github.com/shipstream/bloodraven/kubectlplugin"
)

// version is set by `make build` with -ldflags "-X main.version=...".
var version = ""

func main() {
	cmd := kubectlplugin.NewCommand(&kubectlplugin.Env{Out: os.Stdout, Version: bloodraven.Version(version)})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "kubectl bloodraven:", err)
		os.Exit(kubectlplugin.ExitCode(err))
	}
}
