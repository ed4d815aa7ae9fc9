package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/shipstream/bloodraven/e2e/e2etest"
	"github.com/shipstream/bloodraven/internal/devenv"
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
	started := filepath.Join(t.TempDir(), "started")
	run := e2etest.StartDeployRun(t, p, cfg, []string{"--group", devenv.GroupName, "--instance", devenv.DatabaseName, "--ttl", "30"},
		"sh", "-c", `"$0" deploy mark-ddl && touch "$1" && exec sleep 600`, cfg.OperatorBinary, started)
	waitFor(t, 30*time.Second, func() bool { _, err := os.Stat(started); return err == nil })

	// Both leases are live and renewed: the hold would defer a planned
	// failover for as long as the client runs.
	c := deployClient(t, p)
	st, body := c.call(http.MethodGet, groupAPI(cfg.TLSAddr), nil)
	if st != http.StatusOK || len(body["leases"].([]any)) != 2 {
		t.Fatalf("leases while the command runs: %d %v", st, body)
	}

	took := killPrimaryAndWaitForPdx(t, p, probe, admin, key, g)
	t.Logf("pdx promoted %v after iad was killed, while the hold was being renewed", took.Round(100*time.Millisecond))
	if g.Status.TopologyGeneration != 2 {
		t.Fatalf("generation %d after one failover, want 2", g.Status.TopologyGeneration)
	}

	run.WaitExit(t, 45*time.Second, 5, "lost after DDL", "lost-after-ddl")
	// The client may learn of the revocation (the API's tombstone) before
	// the controller has announced it: the Event follows within a pass.
	var reasons []string
	deadline := time.Now().Add(15 * time.Second)
	for {
		reasons = eventReasons(t, admin)
		if slices.Contains(reasons, "DeploymentLeaseRevoked") && slices.Contains(reasons, "EmergencyFailover") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events %v, want DeploymentLeaseRevoked and EmergencyFailover", reasons)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("deploy run output:\n%s", run.Output())
}
