// Command kubectl-bloodraven is the kubectl plugin for the people on call
// (package kubectlplugin): put it on PATH and run `kubectl bloodraven`.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/shipstream/bloodraven/kubectlplugin"
)

func main() {
	cmd := kubectlplugin.NewCommand(&kubectlplugin.Env{Out: os.Stdout})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "kubectl bloodraven:", err)
		os.Exit(1)
	}
}
