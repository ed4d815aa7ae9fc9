package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/e2e/e2etest"
	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/internal/readonly"
	"github.com/shipstream/bloodraven/internal/testenv"
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
// (SchemaVerified) and a third run succeeds. The DeployRuns record the first
// (lost-after-ddl, revoked from generation 1 to 2) and the third
// (succeeded); the refused second left none.
func TestEmergencyFailoverDuringDeployRun(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	p, cfg := upPlayground(t)
	admin, key, g := bootstrappedWithBudget(t, p, 5)
	probe := siteObserver(t)
	ro, from := readonly.Start(t, e2etest.SitesDSN(p)), time.Now() // @@read_only on both sites every 100 ms
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
	ro.Stop()
	assertNoSplitBrain(t, ro, from, time.Now())
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

	// The DeployRuns list the granted runs with their outcomes: the first
	// lost after its DDL, revoked by the move from generation 1 to 2; the
	// third succeeded at 2. The second was refused before any grant and
	// left none (docs/gate.md: only granted operations leave one).
	o1, o3 := outcomeOf(t, run), outcomeOf(t, run3)
	want := map[string]runWant{
		o1.OperationID: {outcome: "lost-after-ddl", phase: "ddl", leaseEnd: "revoked", reason: "topology_changed", granted: 1, revokedAt: 2},
		o3.OperationID: {outcome: "succeeded", phase: "done", leaseEnd: "released", granted: 2},
	}
	runs := waitRuns(t, admin, want)
	for _, r := range runs {
		if _, ok := want[r.Spec.OperationID]; !ok && !strings.HasPrefix(r.Spec.OperationID, "gate-probe-") {
			t.Fatalf("a DeployRun of %s (%s): only granted runs leave one", r.Spec.OperationID, r.Status.Outcome)
		}
	}
	out := kubectlGetRuns(t, p)
	t.Logf("kubectl get deployruns:\n%s", out)
	for _, col := range []string{"INSTANCE", "OPERATION", "OUTCOME", "PHASE", "GENERATION", "AGE", o1.OperationID, "lost-after-ddl", "succeeded"} {
		if !strings.Contains(out, col) {
			t.Fatalf("kubectl get deployruns does not show %q:\n%s", col, out)
		}
	}
	// A person may read them, not rewrite history.
	r := runs[0].DeepCopy()
	if err := admin.Delete(context.Background(), r); err == nil || !strings.Contains(err.Error(), "written by the operator only") {
		t.Fatalf("an administrator's delete of a DeployRun: %v, want it refused", err)
	}
}

// runOutcome is what `bloodraven deploy run --outcome-file` wrote.
type runOutcome struct {
	OperationID string `json:"operationId"`
	Outcome     string `json:"outcome"`
}

func outcomeOf(t *testing.T, r *e2etest.DeployRun) runOutcome {
	t.Helper()
	b, err := os.ReadFile(r.Outcome)
	if err != nil {
		t.Fatalf("the run's outcome file: %v", err)
	}
	var o runOutcome
	if err := json.Unmarshal(b, &o); err != nil || o.OperationID == "" {
		t.Fatalf("outcome file %s: %v", b, err)
	}
	return o
}

// runWant is what a DeployRun must say.
type runWant struct {
	outcome, phase, leaseEnd, reason string
	granted, revokedAt               int64
	// anyEnd: how the lease ended (released, or revoked by a move that
	// raced the release) is not what the test is about.
	anyEnd bool
}

func (w runWant) matches(r *bloodravenv1alpha1.DeployRun) bool {
	ended := w.anyEnd && r.Status.LeaseEnd != "" ||
		string(r.Status.LeaseEnd) == w.leaseEnd && r.Status.RevocationReason == w.reason && r.Status.RevokedAtGeneration == w.revokedAt
	return string(r.Status.Outcome) == w.outcome && r.Status.Phase == w.phase && ended && r.Spec.GrantGeneration == w.granted &&
		r.Spec.Instance == devenv.DatabaseName && r.Status.StartTime != nil && r.Status.EndTime != nil
}

// waitRuns waits until the playground's DeployRuns include one per
// operation of want, each as want says, and returns them all.
func waitRuns(t *testing.T, admin client.Client, want map[string]runWant) []bloodravenv1alpha1.DeployRun {
	t.Helper()
	var list bloodravenv1alpha1.DeployRunList
	deadline := time.Now().Add(15 * time.Second)
	for {
		if err := admin.List(context.Background(), &list, client.InNamespace(devenv.PlaygroundNamespace)); err != nil {
			t.Fatal(err)
		}
		matched := map[string]bool{} // an operation re-run under its id has a run per tenure
		for i := range list.Items {
			if w, found := want[list.Items[i].Spec.OperationID]; found && w.matches(&list.Items[i]) {
				matched[list.Items[i].Spec.OperationID] = true
			}
		}
		if len(matched) == len(want) {
			return list.Items
		}
		if time.Now().After(deadline) {
			for _, r := range list.Items {
				t.Logf("DeployRun %s: %+v %+v", r.Name, r.Spec, r.Status)
			}
			t.Fatalf("the DeployRuns never matched %+v", want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// kubectlGetRuns is `kubectl get deployruns` in the playground's namespace,
// as the administrator.
func kubectlGetRuns(t *testing.T, p *devenv.Playground) string {
	t.Helper()
	out, err := exec.CommandContext(context.Background(), filepath.Join(testenv.RepoRoot(), "bin", "kubectl"),
		"--kubeconfig", p.Paths.Kubeconfig, "-n", devenv.PlaygroundNamespace, "get", "deployruns").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get deployruns: %v\n%s", err, out)
	}
	return string(out)
}
