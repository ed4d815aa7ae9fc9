package e2e

import (
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shipstream/bloodraven/devenv"
)

// The primary's mariadbd dies while `bloodraven deploy run` holds the mutex
// and the failover-hold and its command has passed the DDL boundary: the
// operator promotes pdx without waiting for the hold (which the client
// keeps renewing until the fence ends it), the generation goes up by one,
// the client stops its command and exits 5 (lost after DDL), and the
// Warning DeploymentLeaseRevoked is raised.
func TestEmergencyFailoverDuringDeployRun(t *testing.T) {
	p, cfg := upPlayground(t)
	admin, key, g := bootstrappedWithBudget(t, p, 5)
	probe := siteObserver(t)
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	outcome := filepath.Join(dir, "outcome.json")

	run := exec.Command(cfg.OperatorBinary, "deploy", "run",
		"--server", "https://"+cfg.TLSAddr, "--ca", p.Paths.CACert, "--token-file", p.Paths.DeployToken,
		"--group", devenv.GroupName, "--instance", devenv.DatabaseName, "--ttl", "30", "--outcome-file", outcome,
		"--", "sh", "-c", `"$0" deploy mark-ddl && touch "$1" && exec sleep 600`, cfg.OperatorBinary, started)
	var out strings.Builder
	run.Stdout, run.Stderr = &out, &out
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	t.Cleanup(func() { _ = run.Process.Kill() })
	waitFor(t, 30*time.Second, func() bool { _, err := os.Stat(started); return err == nil })

	// Both leases are live and renewed: the hold would defer a planned
	// failover for as long as the client runs.
	c := deployClient(t, p)
	st, body := c.call(http.MethodGet, "https://"+cfg.TLSAddr+"/deploy/v1/groups/"+devenv.GroupName, nil)
	if st != http.StatusOK || len(body["leases"].([]any)) != 2 {
		t.Fatalf("leases while the command runs: %d %v", st, body)
	}

	took := killPrimaryAndWaitForPdx(t, p, probe, admin, key, g)
	t.Logf("pdx promoted %v after iad was killed, while the hold was being renewed", took.Round(100*time.Millisecond))
	if g.Status.TopologyGeneration != 2 {
		t.Fatalf("generation %d after one failover, want 2", g.Status.TopologyGeneration)
	}

	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 5 {
			t.Fatalf("deploy run ended with %v, want exit 5 (lost after DDL); output:\n%s", err, out.String())
		}
	case <-time.After(45 * time.Second):
		t.Fatalf("deploy run still running 45 s after the failover; output:\n%s", out.String())
	}
	rec, err := os.ReadFile(outcome)
	if err != nil || !strings.Contains(string(rec), "lost-after-ddl") {
		t.Fatalf("outcome file: %v %s", err, rec)
	}
	reasons := eventReasons(t, admin)
	if !slices.Contains(reasons, "DeploymentLeaseRevoked") || !slices.Contains(reasons, "EmergencyFailover") {
		t.Fatalf("events %v, want DeploymentLeaseRevoked and EmergencyFailover", reasons)
	}
	t.Logf("deploy run output:\n%s", out.String())
}
