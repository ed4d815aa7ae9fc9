package deploycmd

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/shipstream/bloodraven/deployclient"
)

// Exit codes of `bloodraven deploy run` (also in docs/pipeline-client.md and
// docs/api.md). They are distinct so a pipeline (a Job's podFailurePolicy)
// can branch on them: retry on 3 only.
const (
	// ExitOK: the command succeeded under both leases; both were released.
	ExitOK = 0
	// ExitChildFailed: the command exited non-zero (or could not start)
	// while both leases were held; both were released after the outcome
	// was recorded.
	ExitChildFailed = 1
	// ExitUsage: bad flags or local configuration (unreadable CA file,
	// missing token file, no command).
	ExitUsage = 2
	// ExitNotAcquired: the leases could not be taken now: the mutex stayed
	// held past --wait, the operation is live under another runner (without
	// --take-over), the token was refused (401), or the API was
	// unreachable. Retrying later may succeed. The command was not started.
	ExitNotAcquired = 3
	// ExitLostBeforeDDL: authority was lost before the command marked the
	// DDL boundary; the command was stopped and the --on-abort command (if
	// any) succeeded.
	ExitLostBeforeDDL = 4
	// ExitLostAfterDDL: authority was lost at or after the DDL boundary; the
	// command was stopped. A person must verify the schema before any retry.
	ExitLostAfterDDL = 5
	// ExitAbortFailed: authority was lost before the DDL boundary and the
	// --on-abort command failed, or did not end within --on-abort-timeout
	// (its process group was then killed).
	ExitAbortFailed = 6
	// ExitNotRecorded: the command ended (succeeded or failed) but its
	// outcome could not be written to --outcome-file, so the migration
	// mutex was left to lapse at its ttl. (After a loss, codes 4-6 win.)
	ExitNotRecorded = 7
	// ExitRefused: a refusal no retry can change: 403 forbidden (without
	// --namespace, one cause is a group name that more than one namespace
	// authorizes this ServiceAccount for; --namespace settles it), 409
	// revoked at acquisition (the operation id can never be granted
	// again), 409 verification_required, an answer for another namespace
	// than --namespace. The command was not started.
	ExitRefused = 8
)

// Environment of the CLI: defaults for its flags.
const (
	EnvServer    = "BLOODRAVEN_DEPLOY_SERVER"
	EnvCA        = "BLOODRAVEN_DEPLOY_CA"
	EnvTokenFile = "BLOODRAVEN_DEPLOY_TOKEN_FILE"
	// EnvNamespace is the default of --namespace: the group's namespace.
	EnvNamespace = "BLOODRAVEN_DEPLOY_NAMESPACE"
)

// Environment given to the command and to the abort command.
const (
	EnvGroup       = "BLOODRAVEN_GROUP"
	EnvInstance    = "BLOODRAVEN_INSTANCE"
	EnvOperationID = "BLOODRAVEN_OPERATION_ID"
	EnvGeneration  = "BLOODRAVEN_TOPOLOGY_GENERATION"
	// EnvDDLMarker names the file whose existence marks the DDL boundary.
	// Create it (or run `bloodraven deploy mark-ddl`) before the first
	// statement that changes the schema.
	EnvDDLMarker = "BLOODRAVEN_DDL_MARKER"
	// EnvLostCause is given to the abort command: why authority was lost.
	EnvLostCause = "BLOODRAVEN_LOST_CAUSE"
	// EnvControl names the run's control socket (a Unix socket in a
	// directory only the run's user may enter): mark-ddl asks the run
	// through it to confirm the phase with the operator.
	EnvControl = "BLOODRAVEN_DEPLOY_CONTROL"
)

// Defaults inside a Pod: the token at the path the spec's examples use, the
// CA projected beside it, the Service of a release named bloodraven in
// namespace bloodraven.
const (
	DefaultServer    = "https://bloodraven.bloodraven.svc:8443"
	DefaultCA        = "/var/run/deploy/ca.crt"
	DefaultTokenFile = "/var/run/deploy/token"
)

// Version is what --version prints; the binaries stamp it.
var Version = "dev"

// exitCode is an error that carries the run's exit code; its message (if
// any) was printed already.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit %d", int(e)) }

// Main runs `bloodraven deploy <args>` (the operator binary's entry) and
// returns the exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	return Run("bloodraven deploy", args, stdin, stdout, stderr, getenv)
}

// Run runs the command tree under the name it was invoked as
// (`bloodraven-deploy`, or `bloodraven deploy`) and returns the exit code.
func Run(name string, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	root := NewCommand(name, stdin, stdout, stderr, getenv)
	root.SetArgs(args)
	err := root.Execute()
	var code exitCode
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &code):
		return int(code)
	default:
		// A flag or argument error: cobra's own message, then the hint.
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", name, err, name)
		return ExitUsage
	}
}

// NewCommand is the command tree: run, status, mark-ddl, cut-over,
// postponing and completion.
func NewCommand(name string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) *cobra.Command {
	root := &cobra.Command{
		Use:   name,
		Short: "Hold a MySQL failover group's migration mutex and failover-hold around a schema migration",
		Long: "The pipeline side of Bloodraven's deployment API (/deploy/v1).\n\n" +
			"'run' takes the group's migration mutex, then the failover-hold, runs a command while both are\n" +
			"renewed and watched, and stops it when authority is lost. See 'run --help' for its exit codes.",
		SilenceErrors: true,
		SilenceUsage:  true,
		Version:       Version,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(runCommand(stdin, stdout, stderr, getenv), statusCommand(stdout, stderr, getenv), markDDLCommand(stderr, getenv),
		cutOverCommand(stderr, getenv), postponingCommand(stderr, getenv))
	return root
}

// connFlags are the flags that say where the API is, and in which
// namespace the group is.
type connFlags struct {
	server, ca, tokenFile, namespace string
}

func (c *connFlags) register(fs *pflag.FlagSet, getenv func(string) string) {
	def := func(key, d string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return d
	}
	fs.StringVar(&c.server, "server", def(EnvServer, DefaultServer), "base URL of the deployment API (env "+EnvServer+")")
	fs.StringVar(&c.ca, "ca", def(EnvCA, DefaultCA), "PEM CA bundle the server's certificate must chain to; its hostname is verified too (env "+EnvCA+")")
	fs.StringVar(&c.tokenFile, "token-file", def(EnvTokenFile, DefaultTokenFile), "projected ServiceAccount token, audience bloodraven-deploy; read again for every request (env "+EnvTokenFile+")")
	fs.StringVar(&c.namespace, "namespace", def(EnvNamespace, ""), "namespace of the MysqlFailoverGroup, sent with every request so that only it is considered; "+
		"settles a 403 when a group of that name exists in more than one namespace; default: learned from the first answer that names one, then pinned (env "+EnvNamespace+")")
}

func (c *connFlags) client() (*deployclient.Client, error) {
	if _, err := deployclient.ReadToken(c.tokenFile); err != nil {
		return nil, fmt.Errorf("%w (give --token-file or %s)", err, EnvTokenFile)
	}
	return deployclient.New(deployclient.Config{Server: c.server, CAFile: c.ca, TokenFile: c.tokenFile, Namespace: c.namespace, UserAgent: "bloodraven-deploy-cli"})
}

// markDDLCommand is `mark-ddl`, run by the command inside a run before its
// first schema change. It creates the marker file (so a loss from here on is
// decided as "after the boundary", the cautious side) and then asks the run,
// over its control socket, to renew the migration lease with phase ddl; it
// exits 0 only once the operator answered 200 to that renewal at the grant's
// generation, so the operator's record of the operation says ddl before the
// first schema change. The verification gate acts on that record
// (docs/leases.md, "The verification gate").
func markDDLCommand(stderr io.Writer, getenv func(string) string) *cobra.Command {
	return &cobra.Command{
		Use:   "mark-ddl",
		Short: "Inside a run: mark the DDL boundary, confirmed by the operator, before the first schema change",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fail := func(code int, format string, a ...any) error {
				fmt.Fprintf(stderr, "bloodraven deploy mark-ddl: "+format+"\n", a...)
				return exitCode(code)
			}
			path := getenv(EnvDDLMarker)
			if path == "" {
				return fail(ExitUsage, "%s is not set: run this inside 'bloodraven deploy run -- ...'", EnvDDLMarker)
			}
			if err := writeSynced(path, []byte(deployclient.RealClock{}.Now().UTC().Format(time.RFC3339Nano)+"\n")); err != nil {
				return fail(1, "%v", err)
			}
			sock := getenv(EnvControl)
			if sock == "" {
				return fail(1, "%s is not set: the run that started this command cannot confirm the phase (is it older than this mark-ddl?); the marker file was written, the boundary is not confirmed", EnvControl)
			}
			answer, err := askRun(sock, "mark-ddl", markDDLTimeout)
			if err != nil {
				return fail(1, "the DDL boundary was not confirmed: %v; do not start the schema change", err)
			}
			if answer != "" {
				fmt.Fprintf(stderr, "bloodraven deploy mark-ddl: %s\n", answer)
			}
			return nil
		},
	}
}

// markDDLTimeout bounds mark-ddl's wait for the run's answer; the run answers
// at the latest when the lease's deadline passes.
const markDDLTimeout = 3 * time.Minute

// writeSynced writes data to path through a synced temporary file and a
// rename, so that the file is either absent or complete.
func writeSynced(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// newOperationID is a random UUID (version 4).
func newOperationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// explain turns an acquisition failure into what a person can do about it.
// namespace is --namespace (empty when not given).
func explain(err error, group, namespace, instance, op, tokenFile string, wait time.Duration) string {
	var ae *deployclient.APIError
	var acq *deployclient.AcquireError
	var live *deployclient.OperationLiveError
	var ud *deployclient.UncertainDDLError
	var ne *deployclient.NamespaceError
	errors.As(err, &acq)
	switch {
	case errors.As(err, &live):
		return live.Error()
	case errors.As(err, &ud):
		return ud.Error()
	case errors.As(err, &ne):
		return fmt.Sprintf("%v: the server answered for another namespace than the one this run pinned; nothing was started", ne)
	}
	if !errors.As(err, &ae) {
		return fmt.Sprintf("%v: is the deployment API reachable at the --server URL, and does --ca name its CA?", err)
	}
	switch {
	case ae.Code == deployclient.CodeHeld && ae.Holder == nil:
		return fmt.Sprintf("the migration mutex of group %s is held by another operation (the answer did not say which)", group)
	case ae.Code == deployclient.CodeHeld && acq != nil && acq.WaitedOut:
		return fmt.Sprintf("the migration mutex of group %s is still held by operation %s (instance %s, until %s) after waiting %s: raise --wait, or ask the holder's owner",
			group, ae.Holder.OperationID, ae.Holder.Instance, ae.Holder.ExpiresAt, wait)
	case ae.Code == deployclient.CodeHeld:
		return fmt.Sprintf("the migration mutex of group %s is held by operation %s (instance %s, until %s); --wait is %s", group, ae.Holder.OperationID, ae.Holder.Instance, ae.Holder.ExpiresAt, wait)
	case ae.Code == deployclient.CodeDeferralBudgetExhausted:
		return fmt.Sprintf("group %s refuses failover-holds (409 deferral_budget_exhausted): a planned operation waited its whole deferral budget (spec.maxDeferralSeconds) and runs now; the migration mutex was released: retry after it has run", group)
	case ae.Code == deployclient.CodeRevoked:
		return fmt.Sprintf("operation %s was revoked before (%s, group generation %d) and can never be granted again: find out what happened to it, then use a new --operation-id", op, ae.Reason, ae.Generation)
	case ae.Code == deployclient.CodeUnauthenticated:
		return fmt.Sprintf("the token in %s was not accepted (401): it must be a projected ServiceAccount token for audience bloodraven-deploy that has not expired", tokenFile)
	case ae.Code == deployclient.CodeVerificationRequired:
		return fmt.Sprintf("instance %s is gated (409 verification_required): operation %s lost authority past its DDL boundary (generation %d); once a person has checked the schema: kubectl annotate mysqldatabase %s bloodraven.shipstream.io/schema-verified=%s", instance, ae.OperationID, ae.Generation, instance, ae.OperationID)
	case ae.Code == deployclient.CodeForbidden && namespace != "":
		return fmt.Sprintf("forbidden (403): this ServiceAccount is not in spec.deploymentClients of MysqlDatabase %s for group %s in namespace %s, or the group does not exist there", instance, group, namespace)
	case ae.Code == deployclient.CodeForbidden:
		return fmt.Sprintf("forbidden (403): this ServiceAccount is not in spec.deploymentClients of MysqlDatabase %s for group %s, or the group does not exist; "+
			"or groups named %s in more than one namespace authorize it (an ambiguity across namespaces): give --namespace (or %s) to name the group's namespace", instance, group, group, EnvNamespace)
	case ae.Code == deployclient.CodeMigrationNotHeld:
		return "the failover-hold was refused (403 migration_not_held): the migration mutex was lost while the hold was asked for"
	case ae.Code == deployclient.CodeBadRequest:
		return fmt.Sprintf("the API rejected the request (400): %s", ae.Message)
	default:
		return fmt.Sprintf("%v (still failing after --wait %s)", err, wait)
	}
}

func commandLine(argv []string) string {
	return strings.Join(argv, " ")
}
