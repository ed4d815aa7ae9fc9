package kubectlplugin

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// Shell completion: cobra's `completion` command writes the script, and
// kubectl (1.26+) runs `kubectl_complete-bloodraven`, which calls the
// hidden `__complete`, to complete `kubectl bloodraven …`. Names come from
// the cluster with the command line's kubectl flags (-n, --context, …),
// bounded by completionTimeout; a cluster that does not answer completes
// nothing rather than an error.

const completionTimeout = 5 * time.Second

// completeGroups completes one GROUP: the namespace's groups.
func (e *Env) completeGroups(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return e.names(cmd.Context(), &bloodravenv1alpha1.MysqlFailoverGroupList{}, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completeDatabaseAndOperation completes verify's DATABASE (the
// namespace's databases), then OPERATION (the one its gate waits on).
func (e *Env) completeDatabaseAndOperation(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	switch len(args) {
	case 0:
		return e.names(cmd.Context(), &bloodravenv1alpha1.MysqlDatabaseList{}, toComplete), cobra.ShellCompDirectiveNoFileComp
	case 1:
		ctx, cancel, ok := e.completionContext(cmd.Context())
		defer cancel()
		db := &bloodravenv1alpha1.MysqlDatabase{}
		if !ok || e.Client.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: args[0]}, db) != nil || db.Status.PendingVerification == nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return []string{db.Status.PendingVerification.OperationID}, cobra.ShellCompDirectiveNoFileComp
	}
	return nil, cobra.ShellCompDirectiveNoFileComp
}

// completeSites completes failover's --to: the group's sites but its
// primary.
func (e *Env) completeSites(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) != 1 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel, ok := e.completionContext(cmd.Context())
	defer cancel()
	g := &bloodravenv1alpha1.MysqlFailoverGroup{}
	if !ok || e.Client.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: args[0]}, g) != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, s := range g.Spec.Sites {
		if s.Name != g.Status.ActiveSite && strings.HasPrefix(s.Name, toComplete) {
			out = append(out, s.Name)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// names lists the names of list's objects in the namespace that start
// with prefix.
func (e *Env) names(ctx context.Context, list client.ObjectList, prefix string) []string {
	ctx, cancel, ok := e.completionContext(ctx)
	defer cancel()
	if !ok || e.Client.List(ctx, list, client.InNamespace(e.Namespace)) != nil {
		return nil
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil
	}
	var match []string
	for _, o := range items {
		if n := o.(client.Object).GetName(); strings.HasPrefix(n, prefix) {
			match = append(match, n)
		}
	}
	return match
}

// completionContext connects (completion runs no PersistentPreRunE) and
// bounds the lookups; ok is false when there is no client. The REST
// config's own timeout is completionTimeout too, unless --request-timeout
// says otherwise: the client's discovery calls take no context.
func (e *Env) completionContext(ctx context.Context) (context.Context, context.CancelFunc, bool) {
	if ctx == nil {
		ctx = context.Background()
	}
	if e.Client == nil && (e.flags.Timeout == nil || *e.flags.Timeout == "" || *e.flags.Timeout == "0") {
		e.flags.WrapConfigFn = func(c *rest.Config) *rest.Config {
			c.Timeout = completionTimeout
			return c
		}
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	return ctx, cancel, e.connect() == nil
}
