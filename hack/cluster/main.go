// Command bloodraven-cluster is make cluster: it brings up the single-node
// Kubernetes of internal/node on this machine (root only), prints how to
// reach it, and stops and cleans everything it started on SIGINT/SIGTERM.
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
	layout := node.Layout{Root: abs, StateDir: filepath.Join(abs, ".dev", "cluster")}
	if down {
		return node.Teardown(layout)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	n, err := node.Up(ctx, node.Config{Layout: layout, Log: os.Stdout})
	if err != nil {
		return err
	}
	fmt.Printf("\nnode %s is up (%.0f s)\n  export KUBECONFIG=%s\n  kubectl get nodes,pods -A\nCtrl-C stops it and cleans the host.\n",
		node.NodeName, time.Since(start).Seconds(), layout.Kubeconfig())
	<-ctx.Done()
	fmt.Println(">> stopping the node")
	return n.Down()
}
