// Command bloodraven-cluster is make cluster (internal/clusterenv): the
// single-node Kubernetes of internal/node on this machine (root only) with
// the chart installed and the playground's group; it prints how to reach
// it, and stops and cleans everything it started on SIGINT/SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/shipstream/bloodraven/internal/clusterenv"
	"github.com/shipstream/bloodraven/internal/node"
)

func main() {
	root := flag.String("root", ".", "the project checkout (bin/, bin/node/)")
	down := flag.Bool("down", false, "only stop and clean what an earlier node left on this machine, then exit")
	flag.Parse()
	if err := run(*root, *down); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(root string, down bool) error {
	abs, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	if down {
		return node.Teardown(node.Layout{Root: abs, StateDir: clusterenv.StateDir(abs)})
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	c, err := clusterenv.Start(ctx, clusterenv.Config{Root: abs, Log: os.Stdout})
	if err != nil {
		return err
	}
	fmt.Printf(`
The cluster is up (%.0f s): node %s, release %s in namespace %s, group playground/playground.
  export KUBECONFIG=%s
  kubectl get pods -A
  kubectl -n playground get mysqlfailovergroup playground
The deployment API is https://%s.%s.svc:8443 for Pods in namespaces labelled
shipstream.io/mysql-client=true with the Pod label bloodraven.shipstream.io/deploy-client=true;
its CA is %s, and %s runs bloodraven-deploy.
Ctrl-C stops everything and cleans the host.
`, time.Since(start).Seconds(), node.NodeName, clusterenv.Release, clusterenv.Namespace, c.Tools.Kubeconfig,
		clusterenv.Release, clusterenv.Namespace, c.CACert, "bloodraven-deploy:dev")
	<-ctx.Done()
	fmt.Println(">> stopping the cluster")
	return c.Stop()
}
