package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
//
// Then the schema-verification gate (issue 24): the database shows
// SchemaVerificationRequired naming the run's operation; a second run
// exits 8 naming verification_required and starts no command; a person
// sets the schema-verified annotation, the operator opens the gate
// (SchemaVerified) and a third run succeeds.
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

	gated := waitGated(t, admin, 30*time.Second)
	if gated.TopologyGeneration != 1 || gated.Ended != "revoked" || gated.Reason != "topology_changed" || !strings.Contains(run.Output(), gated.OperationID) {
		t.Fatalf("pendingVerification %+v: want the run's operation, granted at 1, revoked (topology_changed)", gated)
	}
	waitFor(t, 15*time.Second, func() bool { return slices.Contains(eventReasons(t, admin), "SchemaVerificationRequired") })

	second := filepath.Join(t.TempDir(), "second")
	run2 := e2etest.StartDeployRun(t, p, cfg, []string{"--group", devenv.GroupName, "--instance", devenv.DatabaseName, "--ttl", "30"},
		"sh", "-c", `touch "$0"`, second)
	select {
	case <-run2.Done():
	case <-time.After(60 * time.Second):
		t.Fatalf("the second run did not exit within 60 s:\n%s", run2.Output())
	}
	if run2.ExitCode() != 8 || !strings.Contains(run2.Output(), "verification_required") || !strings.Contains(run2.Output(), gated.OperationID) {
		t.Fatalf("second run: exit %d, want 8 naming verification_required and %s:\n%s", run2.ExitCode(), gated.OperationID, run2.Output())
	}
	if _, err := os.Stat(second); err == nil {
		t.Fatal("the second run started its command on a gated instance")
	}

	// A person checked the schema.
	verifySchema(t, admin, gated.OperationID)
	waitFor(t, 15*time.Second, func() bool { return slices.Contains(eventReasons(t, admin), "SchemaVerified") })

	third := filepath.Join(t.TempDir(), "third")
	run3 := e2etest.StartDeployRun(t, p, cfg, []string{"--group", devenv.GroupName, "--instance", devenv.DatabaseName, "--ttl", "30"},
		"sh", "-c", `"$0" deploy mark-ddl && touch "$1"`, cfg.OperatorBinary, third)
	run3.WaitExit(t, 60*time.Second, 0, "succeeded once verified", "succeeded")
	if _, err := os.Stat(third); err != nil {
		t.Fatalf("the third run's command did not run: %v", err)
	}
	// It confirmed its end: nothing gates the instance.
	expectNotGated(t, p, admin, cfg.TLSAddr, "a run that confirmed its end")
}
