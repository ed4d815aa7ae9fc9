package kubectlplugin

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// Env is what the commands run against; NewCommand fills it from kubectl's
// flags unless a test set Client.
type Env struct {
	Client    client.Client
	Namespace string
	Clock     clock.PassiveClock
	Out       io.Writer
	// Poll is how often the waiting commands look again (default 500 ms).
	Poll time.Duration
	// Version is what --version prints.
	Version string

	flags *genericclioptions.ConfigFlags
}

// NewCommand is the root command, `kubectl bloodraven`. With env.Client
// nil it connects with kubectl's own flags (genericclioptions.ConfigFlags:
// --kubeconfig, --context, -n, --as, --as-group, --request-timeout,
// --server, --token, …), as kubectl does; a test sets Client and
// Namespace.
func NewCommand(env *Env) *cobra.Command {
	if env.Clock == nil {
		env.Clock = clock.RealClock{}
	}
	env.flags = genericclioptions.NewConfigFlags(true)
	root := &cobra.Command{
		Use:           "kubectl-bloodraven",
		Short:         "Look at and act on Bloodraven's MySQL failover groups (for the people on call)",
		Long:          "Look at and act on Bloodraven's MySQL failover groups (for the people on call).\n\n" + exitCodesHelp,
		Version:       env.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		// An unknown command is a usage error (cobra's own message).
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("%w: unknown command %q for %q", ErrUsage, args[0], cmd.CommandPath())
			}
			return nil
		},
		// Without a command: the help.
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		// Help and the completion scripts need no cluster.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.HasParent() || cmd.Name() == "help" || cmd.Name() == "completion" || cmd.Parent().Name() == "completion" {
				return nil
			}
			return env.connect()
		},
	}
	root.SetOut(env.Out)
	root.SetVersionTemplate("kubectl-bloodraven {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return fmt.Errorf("%w: %w", ErrUsage, err) })
	env.flags.AddFlags(root.PersistentFlags())
	root.AddCommand(statusCommand(env), leasesCommand(env), revokeCommand(env), failoverCommand(env), verifyCommand(env))
	return root
}

// connect makes env's client from kubectl's flags, once; a client a test
// set is kept (the -n flag still names the namespace).
func (e *Env) connect() error {
	ns := ""
	if e.flags.Namespace != nil {
		ns = *e.flags.Namespace
	}
	if e.Client != nil {
		if ns != "" {
			e.Namespace = ns
		}
		return nil
	}
	cfg, err := e.flags.ToRESTConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	if ns == "" {
		if ns, _, err = e.flags.ToRawKubeConfigLoader().Namespace(); err != nil {
			return fmt.Errorf("kubeconfig namespace: %w", err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: bloodravenscheme.New()})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	e.Client, e.Namespace = c, ns
	return nil
}

func (e *Env) poll() time.Duration {
	if e.Poll > 0 {
		return e.Poll
	}
	return 500 * time.Millisecond
}

func (e *Env) group(ctx context.Context, name string) (*bloodravenv1alpha1.MysqlFailoverGroup, error) {
	g := &bloodravenv1alpha1.MysqlFailoverGroup{}
	if err := e.Client.Get(ctx, types.NamespacedName{Namespace: e.Namespace, Name: name}, g); err != nil {
		return nil, fmt.Errorf("group %s/%s: %w", e.Namespace, name, err)
	}
	return g, nil
}

// records are the group's deployment Lease records, newest grant first.
// Records of another group of that name (another UID) are left out.
func (e *Env) records(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup) ([]*leases.Record, error) {
	var list coordinationv1.LeaseList
	if err := e.Client.List(ctx, &list, client.InNamespace(g.Namespace),
		client.MatchingLabels{leasestore.LabelGroup: leases.LabelValue(g.Name)}); err != nil {
		return nil, fmt.Errorf("deployment Leases of %s/%s: %w", g.Namespace, g.Name, err)
	}
	var out []*leases.Record
	for i := range list.Items {
		rec, err := leasestore.Decode(&list.Items[i])
		if err != nil || rec == nil || rec.Group != g.Name || !rec.BelongsTo(string(g.UID)) {
			continue
		}
		out = append(out, rec)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].GrantedAt.After(out[j].GrantedAt) })
	return out, nil
}

// selection is which groups a read names: one GROUP, every group of the
// namespace (no GROUP), or every group of every namespace (-A).
type selection struct {
	name          string
	allNamespaces bool
}

func (e *Env) groups(ctx context.Context, sel selection) ([]groupRecords, error) {
	var gs []*bloodravenv1alpha1.MysqlFailoverGroup
	if sel.name != "" {
		g, err := e.group(ctx, sel.name)
		if err != nil {
			return nil, err
		}
		gs = append(gs, g)
	} else {
		var list bloodravenv1alpha1.MysqlFailoverGroupList
		var opts []client.ListOption
		where := "every namespace"
		if !sel.allNamespaces {
			opts, where = append(opts, client.InNamespace(e.Namespace)), "namespace "+e.Namespace
		}
		if err := e.Client.List(ctx, &list, opts...); err != nil {
			return nil, fmt.Errorf("groups of %s: %w", where, err)
		}
		sort.Slice(list.Items, func(i, j int) bool {
			a, b := list.Items[i], list.Items[j]
			return a.Namespace < b.Namespace || (a.Namespace == b.Namespace && a.Name < b.Name)
		})
		for i := range list.Items {
			gs = append(gs, &list.Items[i])
		}
	}
	out := make([]groupRecords, 0, len(gs))
	for _, g := range gs {
		recs, err := e.records(ctx, g)
		if err != nil {
			return nil, err
		}
		out = append(out, groupRecords{g, recs})
	}
	return out, nil
}

// readCommand is a read-only command over [GROUP] or -A, in the -o format.
func readCommand(env *Env, use, short string, write func(p printer, groups []groupRecords, sel selection, now time.Time) error) *cobra.Command {
	var sel selection
	var output string
	cmd := &cobra.Command{
		Use:               use,
		Short:             short,
		Args:              maxArgs(1),
		ValidArgsFunction: env.completeGroups,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if sel.allNamespaces {
					return fmt.Errorf("%w: a GROUP and -A: name a group with -n, or list every namespace's with -A", ErrUsage)
				}
				sel.name = args[0]
			}
			if output != "" && output != "json" && output != "yaml" {
				return fmt.Errorf("%w: -o %q: want json or yaml", ErrUsage, output)
			}
			groups, err := env.groups(cmd.Context(), sel)
			if err != nil {
				return err
			}
			return write(printer{format: output, out: env.Out}, groups, sel, env.Clock.Now())
		},
	}
	cmd.Flags().BoolVarP(&sel.allNamespaces, "all-namespaces", "A", false, "every group of every namespace")
	cmd.Flags().StringVarP(&output, "output", "o", "", "json or yaml (default: the human form)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func statusCommand(env *Env) *cobra.Command {
	return readCommand(env, "status [GROUP]", "The group's observation: primary, generation, conditions, the planned operation, the mutex and the holds",
		func(p printer, groups []groupRecords, sel selection, now time.Time) error {
			return p.writeStatuses(groups, sel.name != "", now)
		})
}

func leasesCommand(env *Env) *cobra.Command {
	return readCommand(env, "leases [GROUP]", "The group's deployment Lease records (never a token or a token's hash)",
		func(p printer, groups []groupRecords, sel selection, now time.Time) error {
			return p.writeLeaseList(groups, sel.name != "", sel.allNamespaces, now)
		})
}

func revokeCommand(env *Env) *cobra.Command {
	var ticket, dryRun string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:               "revoke GROUP",
		Short:             "Revoke every deployment lease of the group (the revoke annotation), and wait until the operator has",
		Args:              exactArgs(1),
		ValidArgsFunction: env.completeGroups,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			opts, err := dryRunOptions(dryRun)
			if err != nil {
				return err
			}
			g, err := env.group(ctx, args[0])
			if err != nil {
				return err
			}
			if ticket == "" {
				ticket = "kubectl-bloodraven-" + env.Clock.Now().UTC().Format("20060102T150405Z")
			}
			patch := client.MergeFrom(g.DeepCopy())
			if g.Annotations == nil {
				g.Annotations = map[string]string{}
			}
			g.Annotations[bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation] = ticket
			if err := env.Client.Patch(ctx, g, patch, opts...); err != nil {
				return fmt.Errorf("annotate %s/%s: %w", g.Namespace, g.Name, err)
			}
			if len(opts) > 0 {
				fmt.Fprintf(env.Out, "would ask the operator to revoke every deployment lease of %s/%s (%s=%s) %s\n", g.Namespace, g.Name,
					bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation, ticket, dryRunNote)
				return nil
			}
			fmt.Fprintf(env.Out, "asked the operator to revoke every deployment lease of %s/%s (%s=%s)\n", g.Namespace, g.Name,
				bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation, ticket)
			err = wait.PollUntilContextTimeout(ctx, env.poll(), timeout, true, func(ctx context.Context) (bool, error) {
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
					return false, nil
				}
				_, pending := g.Annotations[bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation]
				return !pending, nil
			})
			if err != nil {
				return fmt.Errorf("%w: the operator did not revoke within %s: is a replica leading? (the annotation stays; it acts when it can)", ErrTimedOut, timeout)
			}
			recs, err := env.records(ctx, g)
			if err != nil {
				return err
			}
			// Each revoked operation has a tombstone of the reason.
			var ops []string
			for _, r := range recs {
				if r.Kind == leases.KindTombstone && r.Reason == leases.ReasonOperatorRevoked && !slices.Contains(ops, r.OperationID) {
					ops = append(ops, r.OperationID)
				}
			}
			if len(ops) == 0 {
				fmt.Fprintln(env.Out, "done: no deployment lease was held")
				return nil
			}
			sort.Strings(ops)
			fmt.Fprintf(env.Out, "done: revoked %s (%s): their renewals and re-grants answer 409 revoked\n", strings.Join(ops, ", "), leases.ReasonOperatorRevoked)
			return nil
		},
	}
	cmd.Flags().StringVar(&ticket, "reason", "", "the annotation's value: a ticket or a note for the Events (default: a time stamp)")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for the operator")
	addDryRun(cmd, &dryRun)
	return cmd
}

// dryRunNote ends what a server dry run printed.
const dryRunNote = "(server dry run: the API server and its webhooks accepted it; nothing was changed)"

// addDryRun adds kubectl's --dry-run; only server (and none) mean
// anything here: the webhooks decide, and a client-side guess would not.
func addDryRun(cmd *cobra.Command, v *string) {
	cmd.Flags().StringVar(v, "dry-run", "none", `"server": send the change as a dry run (the API server and the webhooks check it; nothing is stored, nothing is waited for)`)
	_ = cmd.RegisterFlagCompletionFunc("dry-run", cobra.FixedCompletions([]string{"none", "server"}, cobra.ShellCompDirectiveNoFileComp))
}

func dryRunOptions(v string) ([]client.PatchOption, error) {
	switch v {
	case "none", "":
		return nil, nil
	case "server":
		return []client.PatchOption{client.DryRunAll}, nil
	}
	return nil, fmt.Errorf(`%w: --dry-run=%s: want "server" or "none" (no client dry run: the operator's webhooks decide)`, ErrUsage, v)
}

// verifyCommand opens a database's schema-verification gate: it sets the
// schema-verified annotation to OPERATION, only if that is the operation
// the gate waits on, and waits until the operator has opened it.
func verifyCommand(env *Env) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "verify DATABASE OPERATION",
		Short: "Say that a person checked the schema a lost migration may have half-applied, and unblock the next migration",
		Long: "After a migration lost authority past its DDL boundary (the pipeline exited 5), the MysqlDatabase is gated:\n" +
			"new migrations answer 409 verification_required. Check the schema first (docs/lost-authority.md); then\n" +
			"verify names the operation the gate waits on, and waits until the operator has opened the gate.",
		Args:              exactArgs(2),
		ValidArgsFunction: env.completeDatabaseAndOperation,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			db := &bloodravenv1alpha1.MysqlDatabase{}
			key := types.NamespacedName{Namespace: env.Namespace, Name: args[0]}
			if err := env.Client.Get(ctx, key, db); err != nil {
				return fmt.Errorf("database %s/%s: %w", key.Namespace, key.Name, err)
			}
			op := args[1]
			pending := db.Status.PendingVerification
			switch {
			case pending == nil && db.Status.LastVerifiedOperationID == op:
				fmt.Fprintf(env.Out, "%s/%s: operation %s is already verified; nothing gates the database\n", db.Namespace, db.Name, op)
				return nil
			case pending == nil:
				return fmt.Errorf("%w: %s/%s waits on no verification: nothing to verify", ErrNotWaitedOn, db.Namespace, db.Name)
			case pending.OperationID != op:
				return fmt.Errorf("%w: %s/%s waits on operation %s (topologyGeneration %d, %s), not %s: check that operation's schema",
					ErrNotWaitedOn, db.Namespace, db.Name, pending.OperationID, pending.TopologyGeneration, pending.Ended, op)
			}
			patch := client.MergeFrom(db.DeepCopy())
			if db.Annotations == nil {
				db.Annotations = map[string]string{}
			}
			db.Annotations[bloodravenv1alpha1.SchemaVerifiedAnnotation] = op
			if err := env.Client.Patch(ctx, db, patch); err != nil {
				return fmt.Errorf("annotate %s/%s: %w", db.Namespace, db.Name, err)
			}
			fmt.Fprintf(env.Out, "set %s=%s on %s/%s\n", bloodravenv1alpha1.SchemaVerifiedAnnotation, op, db.Namespace, db.Name)
			err := wait.PollUntilContextTimeout(ctx, env.poll(), timeout, true, func(ctx context.Context) (bool, error) {
				if err := env.Client.Get(ctx, key, db); err != nil {
					return false, nil
				}
				return db.Status.PendingVerification == nil && db.Status.LastVerifiedOperationID == op, nil
			})
			if err != nil {
				return fmt.Errorf("%w: the operator did not open the gate within %s: is a replica leading? (the annotation stays; it acts when it can)", ErrTimedOut, timeout)
			}
			fmt.Fprintf(env.Out, "done: %s/%s verified for operation %s; new migrations may be granted\n", db.Namespace, db.Name, op)
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for the operator")
	return cmd
}

func failoverCommand(env *Env) *cobra.Command {
	var site, id, dryRun string
	var timeout time.Duration
	var noWait bool
	cmd := &cobra.Command{
		Use:               "failover GROUP --to SITE",
		Short:             "Request a planned failover and follow it (Deferred shows the blocking hold and the retry time)",
		Args:              exactArgs(1),
		ValidArgsFunction: env.completeGroups,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if site == "" {
				return fmt.Errorf("%w: --to SITE is required", ErrUsage)
			}
			opts, err := dryRunOptions(dryRun)
			if err != nil {
				return err
			}
			g, err := env.group(ctx, args[0])
			if err != nil {
				return err
			}
			if id == "" {
				id = "kubectl-" + env.Clock.Now().UTC().Format("20060102t150405")
			}
			patch := client.MergeFrom(g.DeepCopy())
			g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: id, TargetSite: site}
			if err := env.Client.Patch(ctx, g, patch, opts...); err != nil {
				return fmt.Errorf("request the failover of %s/%s: %w", g.Namespace, g.Name, err)
			}
			if len(opts) > 0 {
				fmt.Fprintf(env.Out, "would request planned failover %s of %s/%s to %s %s\n", id, g.Namespace, g.Name, site, dryRunNote)
				return nil
			}
			fmt.Fprintf(env.Out, "requested planned failover %s of %s/%s to %s (generation %d)\n", id, g.Namespace, g.Name, site, g.Status.TopologyGeneration)
			if noWait {
				return nil
			}
			last := ""
			var result error
			err = wait.PollUntilContextTimeout(ctx, env.poll(), timeout, true, func(ctx context.Context) (bool, error) {
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), g); err != nil {
					return false, nil
				}
				pf := g.Status.PlannedFailover
				if pf == nil || pf.ID != id {
					return false, nil
				}
				line := string(pf.Phase)
				if a := pf.Admission; a != nil && pf.Phase == bloodravenv1alpha1.PlannedFailoverPhaseDeferred {
					line += " by " + a.DeferReason
					if a.RetryTime != nil {
						line += ", retry at " + a.RetryTime.UTC().Format(time.RFC3339)
					}
					if a.Message != "" {
						line += ": " + a.Message
					}
				} else if pf.Reason != "" {
					line += ": " + pf.Reason
				}
				if line != last {
					fmt.Fprintf(env.Out, "%s  %s\n", env.Clock.Now().UTC().Format(time.TimeOnly), line)
					last = line
				}
				switch pf.Phase {
				case bloodravenv1alpha1.PlannedFailoverPhaseCompleted:
					fmt.Fprintf(env.Out, "done: primary %s, generation %d\n", g.Status.ActiveSite, g.Status.TopologyGeneration)
					return true, nil
				case bloodravenv1alpha1.PlannedFailoverPhaseFailed:
					result = fmt.Errorf("%w: %s", ErrFailoverFailed, pf.Reason)
					return true, nil
				}
				return false, nil
			})
			if err != nil {
				return fmt.Errorf("%w: not completed within %s (last: %s); it goes on: kubectl bloodraven status %s", ErrTimedOut, timeout, orNone(last), g.Name)
			}
			return result
		},
	}
	cmd.Flags().StringVar(&site, "to", "", "the site to promote (one of spec.sites)")
	cmd.Flags().StringVar(&id, "id", "", "the request's id (default: kubectl-<time>)")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to follow it")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "request it and return")
	_ = cmd.RegisterFlagCompletionFunc("to", env.completeSites)
	addDryRun(cmd, &dryRun)
	return cmd
}
