package kubectlplugin

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Errors the plugin's exit codes tell apart (ExitCode).
var (
	// ErrUsage: a flag, an argument or a value the command does not take.
	ErrUsage = errors.New("usage")
	// ErrTimedOut: the operator did not act within --timeout; the request
	// stands and it acts when it can.
	ErrTimedOut = errors.New("timed out")
	// ErrFailoverFailed: the planned failover ended Failed.
	ErrFailoverFailed = errors.New("the planned failover failed")
	// ErrNotWaitedOn: verify named an operation the database's gate does
	// not wait on, or the gate is open.
	ErrNotWaitedOn = errors.New("not what the gate waits on")
)

// Exit codes, one per kind of outcome (docs/operator.md lists them).
const (
	ExitOK       = 0
	ExitError    = 1 // anything else: the cluster unreachable, a kubeconfig that does not load, …
	ExitUsage    = 2
	ExitNotFound = 3 // the group or the database does not exist
	ExitRefused  = 4 // the API server refused it: RBAC, a webhook, validation
	ExitTimedOut = 5
	ExitFailed   = 6 // the planned failover ended Failed
	ExitNotGated = 7 // verify: the gate waits on another operation, or on none
)

const exitCodesHelp = `Exit codes: 0 done; 1 an error (the cluster, the kubeconfig); 2 a usage error;
3 the group or database does not exist; 4 the API server refused the change (RBAC,
a webhook, validation); 5 the operator did not act within --timeout (the request
stands); 6 the planned failover failed; 7 verify: the gate waits on another
operation or on none.`

// ExitCode is the process exit code for err, the error a command returned.
func ExitCode(err error) int {
	var status apierrors.APIStatus
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrUsage):
		return ExitUsage
	case errors.Is(err, ErrTimedOut):
		return ExitTimedOut
	case errors.Is(err, ErrFailoverFailed):
		return ExitFailed
	case errors.Is(err, ErrNotWaitedOn):
		return ExitNotGated
	case apierrors.IsNotFound(err):
		return ExitNotFound
	case apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsConflict(err):
		return ExitRefused
	case errors.As(err, &status) && status.Status().Code == 422:
		return ExitRefused
	}
	return ExitError
}

// maxArgs and exactArgs are cobra's, their errors usage errors.
func maxArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.MaximumNArgs(n)(cmd, args); err != nil {
			return fmt.Errorf("%w: %w", ErrUsage, err)
		}
		return nil
	}
}

func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return fmt.Errorf("%w: %w", ErrUsage, err)
		}
		return nil
	}
}
