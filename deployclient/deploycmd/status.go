package deploycmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shipstream/bloodraven/deployclient"
)

func statusCommand(stdout, stderr io.Writer, getenv func(string) string) *cobra.Command {
	var conn connFlags
	var group, output string
	cmd := &cobra.Command{
		Use:   "status --group G [--namespace NS] [-o table|json]",
		Short: "Print the group's observation (GET /deploy/v1/groups/{group})",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return exitCode(status(conn, group, output, stdout, stderr))
		},
	}
	conn.register(cmd.Flags(), getenv)
	cmd.Flags().StringVar(&group, "group", "", "MysqlFailoverGroup name (required)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output: table or json")
	return cmd
}

func status(conn connFlags, group, output string, stdout, stderr io.Writer) int {
	if group == "" || (output != "table" && output != "json") {
		fmt.Fprintln(stderr, "usage: bloodraven deploy status --group G [--namespace NS] [-o table|json]")
		return ExitUsage
	}
	client, err := conn.client()
	if err != nil {
		fmt.Fprintf(stderr, "bloodraven deploy: %v\n", err)
		return ExitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	g, err := client.Observe(ctx, group)
	if err != nil {
		fmt.Fprintf(stderr, "bloodraven deploy: GET group %s: %v\n", qualified(conn.namespace, group), err)
		var ae *deployclient.APIError
		if errors.As(err, &ae) && ae.Code == deployclient.CodeForbidden && conn.namespace == "" {
			fmt.Fprintf(stderr, "bloodraven deploy: one cause of 403 forbidden is a group named %s in more than one namespace that authorizes this ServiceAccount (an ambiguity across namespaces): give --namespace (or %s)\n", group, EnvNamespace)
		}
		return 1
	}
	if output == "json" {
		b, _ := json.MarshalIndent(g, "", "  ")
		fmt.Fprintln(stdout, string(b))
		return ExitOK
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	fmt.Fprintln(w, "GROUP\tNAMESPACE\tACTIVE SITE\tGENERATION\tSTABLE\tUNSTABLE REASON")
	fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%t\t%s\n", g.Group, g.Namespace, dash(g.ActiveSite), g.TopologyGeneration, g.Stable, dash(g.UnstableReason))
	fmt.Fprintln(w)
	fmt.Fprintln(w, "READY\tREPLICATION\tLAG\tDEGRADED\tRECOVERY PENDING")
	fmt.Fprintf(w, "%t\t%t\t%ss\t%s\t%t\n", g.Health.Ready, g.Health.ReplicationRunning,
		strconv.FormatFloat(g.Health.ReplicationLagSeconds, 'f', -1, 64), dash(g.Health.DegradedReason), g.Health.RecoveryPending)
	fmt.Fprintln(w)
	op := g.Operations
	fmt.Fprintln(w, "PLANNED FAILOVER\tREASON\tUPDATE\tRESTORE IN PLACE\tDRAGONFLY UPGRADE")
	fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", dash(op.PlannedFailover.Phase), dash(op.PlannedFailover.Reason), dash(op.UpdatePhase), dash(op.RestoreInPlace), dash(op.DragonflyUpgrade))
	fmt.Fprintln(w)
	if co := g.CutOver; co != nil {
		fmt.Fprintln(w, "CUT-OVER ALLOWED\tREASON\tMESSAGE")
		fmt.Fprintf(w, "%t\t%s\t%s\n", co.Allowed, dash(co.Reason), dash(co.Message))
		fmt.Fprintln(w)
	}
	if len(g.Leases) == 0 {
		fmt.Fprintln(w, "no live leases")
	} else {
		fmt.Fprintln(w, "KIND\tOPERATION\tINSTANCE\tEXPIRES\tGENERATION")
		for _, l := range g.Leases {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\n", l.Kind, l.OperationID, l.Instance, l.ExpiresAt, l.TopologyGeneration)
		}
	}
	if err := w.Flush(); err != nil {
		return 1
	}
	return ExitOK
}
