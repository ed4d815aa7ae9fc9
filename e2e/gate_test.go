package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/e2e/e2etest"
	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/internal/readonly"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
)

// The schema-verification gate closes however a run ends past its DDL
// boundary (issue 24), on the operator binary and real MariaDB:
//   - a command that fails (exit 1) after `deploy mark-ddl` gates the
//     instance (its lease is released at phase ddl);
//   - one that fails before the boundary does not;
//   - a runner SIGKILLed right after `deploy mark-ddl` returned gates it
//     through the lease's expiry, with no release and no grant asking;
//   - a run that confirmed its end (exit 0) does not.
//
// Each run leaves a DeployRun with its outcome (failed, expired, succeeded)
// and the DDL boundary it reached.
//
// Each gate is opened again with the schema-verified annotation, once
// through `kubectl bloodraven verify`.
func TestTheGateClosesHoweverARunEndsPastItsDDLBoundary(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	p, cfg := upPlayground(t)
	ctx := context.Background()
	admin, err := client.New(p.AdminConfig, client.Options{Scheme: bloodravenscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	start := func(op string, ttl int, command ...string) *e2etest.DeployRun {
		return e2etest.StartDeployRun(t, p, cfg, []string{"--group", devenv.GroupName, "--namespace", devenv.PlaygroundNamespace,
			"--instance", devenv.DatabaseName, "--ttl", strconv.Itoa(ttl), "--operation-id", op}, command...)
	}
	waitGate := func(op, ended string, within time.Duration) {
		t.Helper()
		if p := waitGated(t, admin, within); p.OperationID != op || p.Ended != ended {
			t.Fatalf("pendingVerification %+v, want %s %s", p, op, ended)
		}
	}
	verify := func(op string) { t.Helper(); verifySchema(t, admin, op) }
	// killAfterDDL runs op (ttl 5 s) past `deploy mark-ddl`, then kills its
	// runner -9, and the orphaned command with it (not what this test is
	// about): nothing releases the lease.
	killAfterDDL := func(t *testing.T, op string) {
		t.Helper()
		pidFile := filepath.Join(t.TempDir(), "pid")
		run := start(op, 5, "sh", "-c", `"$0" deploy mark-ddl && echo $$ > "$1" && exec sleep 600`, cfg.OperatorBinary, pidFile)
		var pid int
		waitFor(t, 30*time.Second, func() bool {
			b, err := os.ReadFile(pidFile)
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			return err == nil && pid > 0
		})
		if err := run.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-run.Done()
	}
	notGated := func(why string) { t.Helper(); expectNotGated(t, p, admin, cfg.TLSAddr, why) }

	t.Run("a command that fails after its DDL boundary", func(t *testing.T) {
		run := start("fails-after-ddl", 30, "sh", "-c", `"$0" deploy mark-ddl && exit 1`, cfg.OperatorBinary)
		run.WaitExit(t, 60*time.Second, 1, "the command failed", "failed")
		waitGate("fails-after-ddl", "released", 30*time.Second)
		verify("fails-after-ddl")
	})
	t.Run("a command that fails before its DDL boundary", func(t *testing.T) {
		run := start("fails-before-ddl", 30, "sh", "-c", `exit 1`)
		run.WaitExit(t, 60*time.Second, 1, "the command failed", "failed")
		notGated("a run that failed before its DDL boundary")
	})
	t.Run("a runner killed right after mark-ddl returned", func(t *testing.T) {
		killAfterDDL(t, "killed-after-ddl")
		// Nothing released the lease and nothing asks for a grant: the
		// group controller sees it expire (ttl 5 s) on a pass.
		waitGate("killed-after-ddl", "expired", 60*time.Second)
		// The person on call verifies with the kubectl plugin: a wrong
		// operation is refused, the right one opens the gate.
		kubectl := kubectlBloodraven(t, p)
		if out, err := kubectl("verify", devenv.DatabaseName, "fails-after-ddl", "-n", devenv.PlaygroundNamespace); err == nil || !strings.Contains(out, "waits on operation killed-after-ddl") {
			t.Fatalf("verify of another operation (err %v):\n%s", err, out)
		}
		out, err := kubectl("verify", devenv.DatabaseName, "killed-after-ddl", "-n", devenv.PlaygroundNamespace)
		if err != nil || !strings.Contains(out, "done: "+devenv.PlaygroundNamespace+"/"+devenv.DatabaseName+" verified for operation killed-after-ddl") {
			t.Fatalf("kubectl bloodraven verify (err %v):\n%s", err, out)
		}
		db := &bloodravenv1alpha1.MysqlDatabase{}
		if err := admin.Get(ctx, playgroundDatabase, db); err != nil || db.Status.PendingVerification != nil || db.Status.LastVerifiedOperationID != "killed-after-ddl" {
			t.Fatalf("after verify: %+v %v", db.Status, err)
		}
	})
	// Issue 35, item 4: verification covers one tenure. The verified
	// operation id is run again, reports its DDL boundary and is killed -9
	// again: the gate closes again, and a new operation is refused until
	// the re-run is verified. At e3e472e the gate stayed open.
	t.Run("a re-run of the verified operation killed again", func(t *testing.T) {
		killAfterDDL(t, "killed-after-ddl")
		waitGate("killed-after-ddl", "expired", 60*time.Second)
		next := start("after-the-rerun", 30, "true")
		select {
		case <-next.Done():
		case <-time.After(60 * time.Second):
			t.Fatalf("a run after the re-run's loss did not exit within 60 s:\n%s", next.Output())
		}
		if next.ExitCode() != 8 || !strings.Contains(next.Output(), "verification_required") || !strings.Contains(next.Output(), "killed-after-ddl") {
			t.Fatalf("a run after the re-run's loss: exit %d, want 8 naming verification_required and killed-after-ddl:\n%s", next.ExitCode(), next.Output())
		}
		verify("killed-after-ddl")
	})
	t.Run("a run that confirmed its end", func(t *testing.T) {
		run := start("succeeds", 30, "sh", "-c", `"$0" deploy mark-ddl`, cfg.OperatorBinary)
		run.WaitExit(t, 60*time.Second, 0, "succeeded", "succeeded")
		notGated("a run that confirmed its end")
	})
	// Every run left a DeployRun saying how it ended: the client's report
	// where it released, the lease's expiry where it was killed.
	runs := waitRuns(t, admin, map[string]runWant{
		"fails-after-ddl":  {outcome: "failed", phase: "ddl", leaseEnd: "released", granted: 1},
		"fails-before-ddl": {outcome: "failed", phase: "pre-ddl", leaseEnd: "released", granted: 1},
		"killed-after-ddl": {outcome: "expired", phase: "ddl", leaseEnd: "expired", granted: 1},
		"succeeds":         {outcome: "succeeded", phase: "done", leaseEnd: "released", granted: 1},
	})
	// The re-run has a run of its own; the first keeps its outcome.
	var killed int
	for _, r := range runs {
		if r.Spec.OperationID == "killed-after-ddl" {
			killed++
			if r.Status.Outcome != "expired" {
				t.Errorf("a run of killed-after-ddl says %s, want expired", r.Status.Outcome)
			}
		}
	}
	if killed != 2 {
		t.Errorf("%d DeployRuns of killed-after-ddl, want 2 (one per tenure)", killed)
	}
}

// A run whose confirming `done` renewal was answered 200 just before a move
// is not gated (issue 24): its schema change ended under authority, and the
// move that revokes its lease afterwards says nothing about the schema. On
// the operator binary and real MariaDB, with @@read_only sampled on both
// sites: a proxy in front of the deployment API holds the run's release of
// the mutex, iad's mariadbd is killed and pdx promoted (generation 2), and
// only then does the release reach the operator. The run exits 0, nothing
// gates the instance, and its DeployRun says succeeded, revoked by the move
// from generation 1 to 2.
func TestARunConfirmedJustBeforeAMoveIsNotGated(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	p, cfg := upPlayground(t)
	admin, key, g := bootstrappedWithBudget(t, p, 5)
	probe := siteObserver(t)
	ro, from := readonly.Start(t, e2etest.SitesDSN(p)), time.Now() // @@read_only on both sites every 100 ms
	proxy := startReleaseHolder(t, p, cfg)
	const op = "confirmed-then-moved"
	run := e2etest.StartDeployRun(t, p, cfg, []string{"--server", proxy.URL, "--ca", proxy.CA, "--group", devenv.GroupName,
		"--instance", devenv.DatabaseName, "--ttl", "30", "--operation-id", op}, "sh", "-c", `"$0" deploy mark-ddl`, cfg.OperatorBinary)
	select {
	case <-proxy.Held:
	case <-run.Done():
		t.Fatalf("the run exited (%d) without releasing its mutex through the proxy:\n%s", run.ExitCode(), run.Output())
	case <-time.After(60 * time.Second):
		t.Fatalf("no release within 60 s:\n%s", run.Output())
	}
	// The release is sent only after the `done` renewal was answered.
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(run.Output(), "authority confirmed after it ended") })

	took := killPrimaryAndWaitForPdx(t, p, probe, admin, key, g)
	t.Logf("pdx promoted %v after iad was killed, while the confirmed run's release was held", took.Round(100*time.Millisecond))
	proxy.Let()
	run.WaitExit(t, 60*time.Second, 0, "succeeded: confirmed before the move", "succeeded")
	t.Logf("deploy run output:\n%s", run.Output())
	ro.Stop()
	assertNoSplitBrain(t, ro, from, time.Now())

	expectNotGated(t, p, admin, cfg.TLSAddr, "a run confirmed (done, 200) before the move")
	waitRuns(t, admin, map[string]runWant{
		op: {outcome: "succeeded", phase: "done", leaseEnd: "revoked", reason: "topology_changed", granted: 1, revokedAt: 2},
	})
}
