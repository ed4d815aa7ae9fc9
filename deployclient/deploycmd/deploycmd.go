package deploycmd

import (
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shipstream/bloodraven/deployclient"
)

// Exit codes of `bloodraven deploy run` (also in the README and
// docs/deploy-client.md). They are distinct so a pipeline can branch on them.
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
	// ExitNotAcquired: the leases could not be taken: the mutex stayed held
	// past --wait, the caller is forbidden, the token was refused, the
	// operation id was revoked before, or the API was unreachable. The
	// command was not started.
	ExitNotAcquired = 3
	// ExitLostBeforeDDL: authority was lost before the command marked the
	// DDL boundary; the command was stopped and the --on-abort command (if
	// any) succeeded.
	ExitLostBeforeDDL = 4
	// ExitLostAfterDDL: authority was lost at or after the DDL boundary; the
	// command was stopped. A person must verify the schema before any retry.
	ExitLostAfterDDL = 5
	// ExitAbortFailed: authority was lost before the DDL boundary and the
	// --on-abort command failed.
	ExitAbortFailed = 6
	// ExitNotRecorded: the command ended (succeeded or failed) but its
	// outcome could not be written to --outcome-file, so the migration
	// mutex was left to lapse at its ttl. (After a loss, codes 4-6 win.)
	ExitNotRecorded = 7
)

// Environment of the CLI: defaults for its flags.
const (
	EnvServer    = "BLOODRAVEN_DEPLOY_SERVER"
	EnvCA        = "BLOODRAVEN_DEPLOY_CA"
	EnvTokenFile = "BLOODRAVEN_DEPLOY_TOKEN_FILE"
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
)

// Defaults inside a Pod: the token at the path the spec's examples use, the
// CA projected beside it, the Service of a release named bloodraven in
// namespace bloodraven.
const (
	DefaultServer    = "https://bloodraven.bloodraven.svc:8443"
	DefaultCA        = "/var/run/deploy/ca.crt"
	DefaultTokenFile = "/var/run/deploy/token"
)

const usage = `usage: bloodraven deploy <command> [flags]

commands:
  run       hold the group's migration mutex and failover-hold around a command
  status    print the group's observation (GET /deploy/v1/groups/{group})
  mark-ddl  inside a run: mark the DDL boundary (before the first schema change)

Run 'bloodraven deploy <command> -h' for its flags.
`

// Main runs `bloodraven deploy <args>` and returns the exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	switch args[0] {
	case "run":
		return runCmd(args[1:], stdin, stdout, stderr, getenv)
	case "status":
		return statusCmd(args[1:], stdout, stderr, getenv)
	case "mark-ddl":
		return markDDL(args[1:], stderr, getenv)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return ExitOK
	default:
		fmt.Fprintf(stderr, "bloodraven deploy: unknown command %q\n\n%s", args[0], usage)
		return ExitUsage
	}
}

// connFlags are the flags that say where the API is.
type connFlags struct {
	server, ca, tokenFile string
}

func (c *connFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	def := func(key, d string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return d
	}
	fs.StringVar(&c.server, "server", def(EnvServer, DefaultServer), "base URL of the deployment API (env "+EnvServer+")")
	fs.StringVar(&c.ca, "ca", def(EnvCA, DefaultCA), "PEM CA bundle the server's certificate must chain to; its hostname is verified too (env "+EnvCA+")")
	fs.StringVar(&c.tokenFile, "token-file", def(EnvTokenFile, DefaultTokenFile), "projected ServiceAccount token, audience bloodraven-deploy; read again for every request (env "+EnvTokenFile+")")
}

func (c *connFlags) client() (*deployclient.Client, error) {
	if _, err := deployclient.ReadToken(c.tokenFile); err != nil {
		return nil, fmt.Errorf("%w (give --token-file or %s)", err, EnvTokenFile)
	}
	return deployclient.New(deployclient.Config{Server: c.server, CAFile: c.ca, TokenFile: c.tokenFile, UserAgent: "bloodraven-deploy-cli"})
}

// markDDL creates the marker file the run named in the environment.
func markDDL(args []string, stderr io.Writer, getenv func(string) string) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "bloodraven deploy mark-ddl: takes no arguments")
		return ExitUsage
	}
	path := getenv(EnvDDLMarker)
	if path == "" {
		fmt.Fprintf(stderr, "bloodraven deploy mark-ddl: %s is not set: run this inside 'bloodraven deploy run -- ...'\n", EnvDDLMarker)
		return ExitUsage
	}
	if err := writeSynced(path, []byte(time.Now().UTC().Format(time.RFC3339Nano)+"\n")); err != nil {
		fmt.Fprintf(stderr, "bloodraven deploy mark-ddl: %v\n", err)
		return ExitUsage
	}
	return ExitOK
}

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
func explain(err error, group, instance, op, tokenFile string, wait time.Duration) string {
	var ae *deployclient.APIError
	var acq *deployclient.AcquireError
	errors.As(err, &acq)
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
	case ae.Code == deployclient.CodeRevoked:
		return fmt.Sprintf("operation %s was revoked before (%s, group generation %d) and can never be granted again: find out what happened to it, then use a new --operation-id", op, ae.Reason, ae.Generation)
	case ae.Code == deployclient.CodeUnauthenticated:
		return fmt.Sprintf("the token in %s was not accepted (401): it must be a projected ServiceAccount token for audience bloodraven-deploy that has not expired", tokenFile)
	case ae.Code == deployclient.CodeForbidden:
		return fmt.Sprintf("forbidden (403): this ServiceAccount is not in spec.deploymentClients of MysqlDatabase %s for group %s, or the group does not exist", instance, group)
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
