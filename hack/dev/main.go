// Command bloodraven-dev runs the playground behind `make dev` in the
// foreground until interrupted. See package devenv.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/shipstream/bloodraven/internal/devenv"
)

func main() {
	root := flag.String("root", ".", "Project checkout (holds bin/ and config/).")
	flag.Parse()
	if err := run(*root); err != nil {
		fmt.Fprintln(os.Stderr, "make dev:", err)
		if errors.Is(err, devenv.ErrAlreadyRunning) {
			os.Exit(3)
		}
		os.Exit(1)
	}
}

func run(root string) error {
	abs, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	p, err := devenv.Up(ctx, devenv.Config{Root: abs, Log: os.Stdout})
	if err != nil {
		return err
	}
	printWelcome(abs, p.Paths)

	var opErr error
	select {
	case <-ctx.Done():
		fmt.Println("\n>> stopping the playground")
	case opErr = <-p.Exited():
		opErr = fmt.Errorf("%v; see %s", opErr, rel(abs, p.Paths.OperatorLog))
	}
	if err := p.Down(); err != nil {
		return errors.Join(opErr, err)
	}
	if opErr == nil {
		fmt.Println(">> stopped")
	}
	return opErr
}

func rel(root, path string) string {
	if r, err := filepath.Rel(root, path); err == nil {
		return r
	}
	return path
}

func printWelcome(root string, p devenv.Paths) {
	fmt.Printf(`
Bloodraven playground is up. Files (fixed paths):
  %-24s cluster-admin kubeconfig for you
  %-24s CA of the TLS listener (SANs: localhost, 127.0.0.1)
  %-24s token of %s/%s, audience %s
  %-24s the operator's log (it runs as %s)

Paste into another terminal:
  export KUBECONFIG=%s PATH=%s:$PATH
  kubectl get mysqlfailovergroups -A
  kubectl get mysqldatabases -n %s
  curl -s http://localhost:8082/status
  curl -s --cacert %s -H "Authorization: Bearer $(cat %s)" https://localhost:8443/deploy/v1/groups/%s
  bloodraven deploy run --server https://localhost:8443 --ca %s --token-file %s \
    --group %s --instance %s -- sh -c 'echo "migrating under generation $BLOODRAVEN_TOPOLOGY_GENERATION"'
  kubectl -n %s patch mfg %s --type=merge -p '{"spec":{"plannedFailover":{"id":"req-1","targetSite":"pdx"}}}'
  mariadb -S %s -e 'SELECT * FROM bloodraven.fence'

The operator is restarted when it exits, as a Deployment's restartPolicy:
Always would, with the playground's state kept. Restart it on purpose:
  make dev-restart-operator              # SIGTERM: it releases leadership first
  make dev-restart-operator SIGNAL=KILL  # a crash: the new one leads once the old Lease lapses (15 s)

Ctrl-C stops everything this command started.
`,
		rel(root, p.Kubeconfig), rel(root, p.CACert),
		rel(root, p.DeployToken), devenv.PlaygroundNamespace, devenv.DeployServiceAccount, devenv.DeployAudience,
		rel(root, p.OperatorLog), devenv.OperatorIdentity(),
		p.Kubeconfig, filepath.Join(root, "bin"),
		devenv.PlaygroundNamespace,
		p.CACert, p.DeployToken, devenv.GroupName,
		p.CACert, p.DeployToken, devenv.GroupName, devenv.DatabaseName,
		devenv.PlaygroundNamespace, devenv.GroupName,
		filepath.Join(root, ".dev", "mysql", "pdx", "mariadbd.sock"))
}
