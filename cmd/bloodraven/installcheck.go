package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shipstream/bloodraven/installcheck"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
)

// checkInstall is `bloodraven check-install`: the chart's `helm test`
// (package installcheck). It exits 1 when a check fails.
func checkInstall(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("check-install", flag.ContinueOnError)
	fs.SetOutput(out)
	statusURL := fs.String("status-url", "", "the leader-only Service's /status, e.g. http://bloodraven.bloodraven.svc:8082/status (required)")
	namespace := fs.String("namespace", "", "where the dry runs happen (required)")
	kubeconfig := fs.String("kubeconfig", "", "a kubeconfig; default: in-cluster, then $KUBECONFIG")
	timeout := fs.Duration("timeout", time.Minute, "for all checks together")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *statusURL == "" || *namespace == "" {
		return fmt.Errorf("check-install: --status-url and --namespace are required")
	}
	cfg, err := restConfig(*kubeconfig)
	if err != nil {
		return fmt.Errorf("check-install: API server config: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: bloodravenscheme.New()})
	if err != nil {
		return fmt.Errorf("check-install: client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	return installcheck.Run(ctx, installcheck.Config{StatusURL: *statusURL, Namespace: *namespace, Client: c,
		HTTP: &http.Client{Timeout: 10 * time.Second}, Out: out})
}
