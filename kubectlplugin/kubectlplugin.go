package kubectlplugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// Env is what the commands run against; NewCommand fills it from the
// kubeconfig flags unless a test set Client.
type Env struct {
	Client    client.Client
	Namespace string
	Clock     clock.PassiveClock
	Out       io.Writer
	// Poll is how often the waiting commands look again (default 500 ms).
	Poll time.Duration
}

// NewCommand is the root command, `kubectl bloodraven`. With env.Client
// nil it connects with the kubeconfig flags (--kubeconfig, --context, -n),
// as kubectl does; a test sets Client and Namespace.
func NewCommand(env *Env) *cobra.Command {
	if env.Clock == nil {
		env.Clock = clock.RealClock{}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	overrides := &clientcmd.ConfigOverrides{}
	var kubeconfig, kubecontext, namespace string
	root := &cobra.Command{
		Use:           "kubectl-bloodraven",
		Short:         "Look at and act on Bloodraven's MySQL failover groups (for the people on call)",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if env.Client != nil {
				if namespace != "" {
					env.Namespace = namespace
				}
				return nil
			}
			if kubeconfig != "" {
				rules.ExplicitPath = kubeconfig
			}
			overrides.CurrentContext = kubecontext
			cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
			cfg, err := cc.ClientConfig()
			if err != nil {
				return fmt.Errorf("kubeconfig: %w", err)
			}
			ns, _, err := cc.Namespace()
			if err != nil {
				return fmt.Errorf("kubeconfig namespace: %w", err)
			}
			if namespace != "" {
				ns = namespace
			}
			c, err := client.New(cfg, client.Options{Scheme: bloodravenscheme.New()})
			if err != nil {
				return fmt.Errorf("client: %w", err)
			}
			env.Client, env.Namespace = c, ns
			return nil
		},
	}
	root.SetOut(env.Out)
	root.PersistentFlags().StringVar(&kubeconfig, "kubeconfig", "", "path to the kubeconfig file")
	root.PersistentFlags().StringVar(&kubecontext, "context", "", "the kubeconfig context to use")
	root.PersistentFlags().StringVarP(&namespace, "namespace", "n", "", "the group's namespace (default: the context's)")
	root.AddCommand(statusCommand(env), leasesCommand(env), revokeCommand(env), failoverCommand(env), verifyCommand(env))
	return root
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

// showCommand is a read-only command over one group and its records.
func showCommand(env *Env, use, short string, write func(io.Writer, *bloodravenv1alpha1.MysqlFailoverGroup, []*leases.Record, time.Time)) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			g, err := env.group(ctx, args[0])
			if err != nil {
				return err
			}
			recs, err := env.records(ctx, g)
			if err != nil {
				return err
			}
			write(env.Out, g, recs, env.Clock.Now())
			return nil
		},
	}
}

func statusCommand(env *Env) *cobra.Command {
	return showCommand(env, "status GROUP", "The group's observation: primary, generation, conditions, the planned operation, the mutex and the holds", writeStatus)
}

func writeStatus(out io.Writer, g *bloodravenv1alpha1.MysqlFailoverGroup, recs []*leases.Record, now time.Time) {
	s := g.Status
	fmt.Fprintf(out, "Group:       %s/%s\n", g.Namespace, g.Name)
	fmt.Fprintf(out, "Primary:     %s\n", orNone(s.ActiveSite))
	fmt.Fprintf(out, "Generation:  %d\n", s.TopologyGeneration)
	if s.PrimaryLostAt != nil {
		fmt.Fprintf(out, "Lost since:  %s (budget %ds)\n", s.PrimaryLostAt.UTC().Format(time.RFC3339), g.Spec.FailureDetectionSeconds)
	}
	if t := s.Transition; t != nil {
		fmt.Fprintf(out, "Transition:  %s to %s since %s\n", t.Operation, t.TargetSite, t.StartedAt.UTC().Format(time.RFC3339))
	}
	var conds []string
	for _, c := range s.Conditions {
		if c.Status == "True" {
			conds = append(conds, c.Type)
		}
	}
	sort.Strings(conds)
	fmt.Fprintf(out, "Conditions:  %s\n", orNone(strings.Join(conds, ", ")))
	if pf := s.PlannedFailover; pf != nil && pf.Phase != "" {
		fmt.Fprintf(out, "Planned:     failover %s to %s: %s", pf.ID, pf.TargetSite, pf.Phase)
		if a := pf.Admission; a != nil {
			if a.DeferReason != "" {
				fmt.Fprintf(out, " (%s", a.DeferReason)
				if a.RetryTime != nil {
					fmt.Fprintf(out, ", retry at %s", a.RetryTime.UTC().Format(time.RFC3339))
				}
				fmt.Fprint(out, ")")
			}
			if a.Message != "" {
				fmt.Fprintf(out, ": %s", a.Message)
			}
		}
		fmt.Fprintln(out)
	}
	mutex, holds := "none", []string{}
	for _, r := range recs {
		if !r.Live(now) || r.State != leases.StateActive {
			continue
		}
		desc := fmt.Sprintf("%s (instance %s, generation %d, expires in %s)", r.OperationID, r.Instance, r.Generation,
			r.ExpiresAt.Sub(now).Round(time.Second))
		switch r.Kind {
		case leases.KindMigration:
			mutex = desc + ", phase " + string(r.Phase.Effective())
		case leases.KindFailoverHold:
			holds = append(holds, desc)
		}
	}
	fmt.Fprintf(out, "Mutex:       %s\n", mutex)
	fmt.Fprintf(out, "Holds:       %s\n", orNone(strings.Join(holds, "; ")))
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func leasesCommand(env *Env) *cobra.Command {
	return showCommand(env, "leases GROUP", "The group's deployment Lease records (never a token or a token's hash)",
		func(out io.Writer, _ *bloodravenv1alpha1.MysqlFailoverGroup, recs []*leases.Record, now time.Time) {
			writeLeases(out, recs, now)
		})
}

func writeLeases(out io.Writer, recs []*leases.Record, now time.Time) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tOPERATION\tINSTANCE\tSTATE\tREASON\tGENERATION\tPHASE\tEXPIRES\tIDENTITY")
	for _, r := range recs {
		state := string(r.State)
		if r.State == leases.StateActive && !r.Live(now) {
			state = "expired"
		}
		expires := "-"
		if !r.ExpiresAt.IsZero() && r.Kind != leases.KindTombstone {
			if d := r.ExpiresAt.Sub(now); d > 0 {
				expires = "in " + d.Round(time.Second).String()
			} else {
				expires = (-d).Round(time.Second).String() + " ago"
			}
		}
		phase := "-"
		if r.Kind == leases.KindMigration {
			phase = string(r.Phase.Effective())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.Kind, r.OperationID, orDash(r.Instance), state, orDash(r.Reason),
			r.Generation, phase, expires, orDash(r.Identity))
	}
	_ = tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func revokeCommand(env *Env) *cobra.Command {
	var ticket string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "revoke GROUP",
		Short: "Revoke every deployment lease of the group (the revoke annotation), and wait until the operator has",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
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
			if err := env.Client.Patch(ctx, g, patch); err != nil {
				return fmt.Errorf("annotate %s/%s: %w", g.Namespace, g.Name, err)
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
				return fmt.Errorf("the operator did not revoke within %s: is a replica leading? (the annotation stays; it acts when it can)", timeout)
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
	return cmd
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
		Args: cobra.ExactArgs(2),
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
				return fmt.Errorf("%s/%s waits on no verification: nothing to verify", db.Namespace, db.Name)
			case pending.OperationID != op:
				return fmt.Errorf("%s/%s waits on operation %s (topologyGeneration %d, %s), not %s: check that operation's schema",
					db.Namespace, db.Name, pending.OperationID, pending.TopologyGeneration, pending.Ended, op)
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
				return fmt.Errorf("the operator did not open the gate within %s: is a replica leading? (the annotation stays; it acts when it can)", timeout)
			}
			fmt.Fprintf(env.Out, "done: %s/%s verified for operation %s; new migrations may be granted\n", db.Namespace, db.Name, op)
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for the operator")
	return cmd
}

// ErrFailoverFailed is returned when the planned failover ends Failed.
var ErrFailoverFailed = errors.New("the planned failover failed")

func failoverCommand(env *Env) *cobra.Command {
	var site, id string
	var timeout time.Duration
	var noWait bool
	cmd := &cobra.Command{
		Use:   "failover GROUP --to SITE",
		Short: "Request a planned failover and follow it (Deferred shows the blocking hold and the retry time)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if site == "" {
				return fmt.Errorf("--to SITE is required")
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
			if err := env.Client.Patch(ctx, g, patch); err != nil {
				return fmt.Errorf("request the failover of %s/%s: %w", g.Namespace, g.Name, err)
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
				return fmt.Errorf("not completed within %s (last: %s); it goes on: kubectl bloodraven status %s", timeout, orNone(last), g.Name)
			}
			return result
		},
	}
	cmd.Flags().StringVar(&site, "to", "", "the site to promote (one of spec.sites)")
	cmd.Flags().StringVar(&id, "id", "", "the request's id (default: kubectl-<time>)")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to follow it")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "request it and return")
	return cmd
}
