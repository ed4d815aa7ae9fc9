package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/shipstream/bloodraven/deployclient/deploycmd"
)

// commands are the binary's commands besides the operator itself, as the
// root's help lists them.
var commands = []struct{ name, short string }{
	{"deploy", "the pipeline client (bloodraven-deploy): run, status, mark-ddl"},
	{"check-install", "what the chart's helm test runs: the leader answers, the webhooks decide, the status is guarded"},
	{"check-lease-guard", "whether the ValidatingAdmissionPolicy that keeps deployment Leases the operator's stands"},
}

// newRootCommand is the binary's one command tree. The root runs the
// operator; its flags keep Go's flag syntax (parseOptions, with
// controller-runtime's --zap-* flags), so cobra leaves them to it. Each
// subcommand parses its own flags too.
func newRootCommand(stdout, stderr io.Writer, exit func(int)) *cobra.Command {
	root := &cobra.Command{
		Use:                "bloodraven [flags] | bloodraven COMMAND",
		Short:              "The Bloodraven operator",
		DisableFlagParsing: true,
		SilenceUsage:       true,
		SilenceErrors:      true,
		RunE:               func(_ *cobra.Command, args []string) error { return run(args, stderr) },
	}
	root.AddCommand(&cobra.Command{
		Use:                "deploy",
		Short:              commands[0].short,
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			exit(deploycmd.Main(args, os.Stdin, stdout, stderr, os.Getenv))
			return nil
		},
	}, &cobra.Command{
		Use:                "check-install",
		Short:              commands[1].short,
		DisableFlagParsing: true,
		RunE:               func(_ *cobra.Command, args []string) error { return checkInstall(args, stdout) },
	}, &cobra.Command{
		Use:                "check-lease-guard",
		Short:              commands[2].short,
		DisableFlagParsing: true,
		RunE:               func(_ *cobra.Command, args []string) error { return checkLeaseGuard(args, stdout) },
	})
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetOut(stdout)
	root.SetErr(stderr)
	return root
}

// usageHeader is printed above the operator's flags by --help.
func usageHeader(out io.Writer) {
	fmt.Fprintf(out, "Usage:\n  bloodraven [flags]        run the operator\n  bloodraven COMMAND [flags]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(out, "  %-18s %s\n", c.name, c.short)
	}
	fmt.Fprintf(out, "\nFlags of the operator:\n")
}

// checkLeaseGuard is `bloodraven check-lease-guard`: the check the operator
// runs every minute, once. It exits 1 when the guard does not stand.
func checkLeaseGuard(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("check-lease-guard", flag.ContinueOnError)
	fs.SetOutput(out)
	name := fs.String("lease-guard-policy", "bloodraven-lease-guard", "the ValidatingAdmissionPolicy and binding to check")
	kubeconfig := fs.String("kubeconfig", "", "a kubeconfig; default: in-cluster, then $KUBECONFIG")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := restConfig(*kubeconfig)
	if err != nil {
		return err
	}
	return checkLeaseGuardOnce(cfg, *name, out)
}

// checkLeaseGuardOnce runs the lease guard check once against cfg's API
// server.
func checkLeaseGuardOnce(cfg *rest.Config, name string, out io.Writer) error {
	c, err := newLeaseGuardCheck(cfg, name, prometheus.NewRegistry(), ctrl.Log)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if why := c.check(ctx); why != "" {
		return fmt.Errorf("the lease guard does not stand: %s", why)
	}
	fmt.Fprintf(out, "lease guard %s: installed, fails closed, bound to deny\n", name)
	return nil
}

// restConfig is the kubeconfig's, or in-cluster, then $KUBECONFIG's.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return ctrl.GetConfig()
}

// exitCode is the process's exit code for what a command returned.
func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errLogged):
		return 1
	}
	fmt.Fprintln(stderr, "bloodraven:", err)
	return 1
}
