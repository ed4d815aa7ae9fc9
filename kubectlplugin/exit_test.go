package kubectlplugin

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestEachOutcomeHasItsExitCode(t *testing.T) {
	gr := schema.GroupResource{Group: "bloodraven.shipstream.io", Resource: "mysqlfailovergroups"}
	for name, tc := range map[string]struct {
		err  error
		want int
	}{
		"done":                      {nil, ExitOK},
		"a usage error":             {fmt.Errorf("%w: -o wide", ErrUsage), ExitUsage},
		"a group that is not there": {fmt.Errorf("group a/b: %w", apierrors.NewNotFound(gr, "b")), ExitNotFound},
		"RBAC":                      {fmt.Errorf("group a/b: %w", apierrors.NewForbidden(gr, "b", errors.New("no"))), ExitRefused},
		"a webhook's field error": {apierrors.NewInvalid(schema.GroupKind{Group: gr.Group, Kind: "MysqlFailoverGroup"}, "b",
			field.ErrorList{field.NotFound(field.NewPath("spec", "plannedFailover", "targetSite"), "x")}), ExitRefused},
		"a conflict":               {apierrors.NewConflict(gr, "b", errors.New("changed")), ExitRefused},
		"the operator did not act": {fmt.Errorf("%w: the operator did not revoke within 2m", ErrTimedOut), ExitTimedOut},
		"a failed failover":        {fmt.Errorf("%w: rolled back", ErrFailoverFailed), ExitFailed},
		"another operation gated":  {fmt.Errorf("%w: waits on op-2", ErrNotWaitedOn), ExitNotGated},
		"the cluster unreachable":  {errors.New("dial tcp: connection refused"), ExitError},
	} {
		if got := ExitCode(tc.err); got != tc.want {
			t.Errorf("%s: exit %d, want %d (%v)", name, got, tc.want, tc.err)
		}
	}
}

// Usage errors come out as ErrUsage without a cluster: an unknown
// command, a flag it does not take, too many arguments. Help and the
// completion scripts need no cluster either.
func TestUsageNeedsNoCluster(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"statsu"}, ExitUsage, ""},
		{[]string{"status", "--no-such-flag"}, ExitUsage, ""},
		{[]string{"status", "a", "b"}, ExitUsage, ""},
		{[]string{"revoke"}, ExitUsage, ""},
		{[]string{}, ExitOK, "Exit codes:"},
		{[]string{"completion", "bash"}, ExitOK, "__start_kubectl-bloodraven"},
		{[]string{"--version"}, ExitOK, "kubectl-bloodraven 1.2.3"},
	} {
		var out bytes.Buffer
		cmd := NewCommand(&Env{Out: &out, Version: "1.2.3"})
		cmd.SetArgs(tc.args)
		cmd.SetErr(&out)
		err := cmd.Execute()
		if got := ExitCode(err); got != tc.code || !strings.Contains(out.String(), tc.out) {
			t.Errorf("%v: exit %d (%v), want %d and %q in:\n%s", tc.args, got, err, tc.code, tc.out, out.String())
		}
	}
}
