package deployapi

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
)

// run reads the DeployRun of op, failing the test when there is none.
func (f *fixture) run(op string) *bloodravenv1alpha1.DeployRun {
	f.t.Helper()
	return f.runFor("counter-app", op)
}

// runFor reads the DeployRun of op's latest tenure for instance, failing
// the test when there is none.
func (f *fixture) runFor(instance, op string) *bloodravenv1alpha1.DeployRun {
	f.t.Helper()
	var out *bloodravenv1alpha1.DeployRun
	for _, r := range f.runs() {
		if r.Spec.OperationID != op || r.Spec.Instance != instance {
			continue
		}
		if out == nil || (r.Status.StartTime != nil && out.Status.StartTime != nil && out.Status.StartTime.Before(r.Status.StartTime)) {
			out = r.DeepCopy()
		}
	}
	if out == nil {
		f.t.Fatalf("no DeployRun of %s for %s", op, instance)
	}
	return out
}

func (f *fixture) runs() []bloodravenv1alpha1.DeployRun {
	f.t.Helper()
	var list bloodravenv1alpha1.DeployRunList
	if err := env.Client.List(f.ctx, &list, client.InNamespace(f.groupNS)); err != nil {
		f.t.Fatal(err)
	}
	return list.Items
}

func expectRun(t *testing.T, r *bloodravenv1alpha1.DeployRun, outcome bloodravenv1alpha1.DeployRunOutcome, phase string, end bloodravenv1alpha1.LeaseEnd) {
	t.Helper()
	if r.Status.Outcome != outcome || r.Status.Phase != phase || r.Status.LeaseEnd != end {
		t.Fatalf("run of %s: outcome %q phase %q leaseEnd %q, want %q %q %q", r.Spec.OperationID,
			r.Status.Outcome, r.Status.Phase, r.Status.LeaseEnd, outcome, phase, end)
	}
}

func TestAGrantedMigrationLeavesADeployRunWithItsReportedOutcome(t *testing.T) {
	f := newFixture(t)
	g := f.grant("migration", "op-1", http.StatusCreated)
	r := f.run("op-1")
	expectRun(t, r, bloodravenv1alpha1.DeployRunRunning, "pre-ddl", "")
	if r.Spec.Instance != "counter-app" || r.Spec.OperationID != "op-1" || r.Spec.GrantGeneration != 1 ||
		r.Spec.Caller != "system:serviceaccount:"+f.clientNS+":deploy" || r.Status.StartTime == nil {
		t.Fatalf("run: %+v", r)
	}
	if len(r.OwnerReferences) != 1 || r.OwnerReferences[0].UID != f.group.UID {
		t.Fatalf("owner references %+v, want the group", r.OwnerReferences)
	}
	f.renewPhase("op-1", g.str("token"), "done")
	if rr := f.do(http.MethodDelete, leasePath("migration", "op-1"), f.token, nil, "X-Lease-Token", g.str("token"),
		"X-Deploy-Outcome", "succeeded"); rr.status != http.StatusNoContent {
		t.Fatalf("release: %d %s", rr.status, rr.raw)
	}
	r = f.run("op-1")
	expectRun(t, r, bloodravenv1alpha1.DeployRunSucceeded, "done", bloodravenv1alpha1.LeaseReleased)
	if r.Status.EndTime == nil || r.Status.EndTime.Before(r.Status.StartTime) {
		t.Fatalf("end %v, start %v", r.Status.EndTime, r.Status.StartTime)
	}

	// A refused grant leaves none; a grant without a report ends
	// "released".
	f.grant("migration", "op-2", http.StatusCreated)
	f.grant("migration", "op-3", http.StatusConflict)
	if n := len(f.runs()); n != 2 {
		t.Fatalf("%d runs, want 2: a refused grant leaves none", n)
	}
}

func TestAReleaseAfterAMoveRecordsTheLossAndBothGenerations(t *testing.T) {
	f := newFixture(t)
	g := f.grant("migration", "op-1", http.StatusCreated)
	f.renewPhase("op-1", g.str("token"), "ddl")
	f.move(2)
	// The client's release after it lost authority: 204, and its report
	// is recorded beside the revocation.
	if rr := f.do(http.MethodDelete, leasePath("migration", "op-1"), f.token, nil, "X-Lease-Token", g.str("token"),
		"X-Deploy-Outcome", "lost-after-ddl"); rr.status != http.StatusNoContent {
		t.Fatalf("release: %d %s", rr.status, rr.raw)
	}
	r := f.run("op-1")
	expectRun(t, r, bloodravenv1alpha1.DeployRunLostAfterDDL, "ddl", bloodravenv1alpha1.LeaseRevoked)
	if r.Status.RevocationReason != "topology_changed" || r.Spec.GrantGeneration != 1 || r.Status.RevokedAtGeneration != 2 {
		t.Fatalf("run: reason %q, granted at %d, revoked at %d; want topology_changed, 1, 2",
			r.Status.RevocationReason, r.Spec.GrantGeneration, r.Status.RevokedAtGeneration)
	}
	// A second report, or another token's, changes nothing.
	f.do(http.MethodDelete, leasePath("migration", "op-1"), f.token, nil, "X-Lease-Token", g.str("token"), "X-Deploy-Outcome", "succeeded")
	expectRun(t, f.run("op-1"), bloodravenv1alpha1.DeployRunLostAfterDDL, "ddl", bloodravenv1alpha1.LeaseRevoked)
}

func TestAMutexTakenOverRecordsHowThePreviousRunEnded(t *testing.T) {
	f := newFixture(t)
	f.grant("migration", "op-1", http.StatusCreated)
	f.clock.Step(31 * time.Second) // op-1's mutex lapses; nobody marked it expired
	f.grant("migration", "op-2", http.StatusCreated)
	r := f.run("op-1")
	expectRun(t, r, bloodravenv1alpha1.DeployRunExpired, "pre-ddl", bloodravenv1alpha1.LeaseExpired)
	expectRun(t, f.run("op-2"), bloodravenv1alpha1.DeployRunRunning, "pre-ddl", "")
}

func TestABadOutcomeHeaderIsRefusedAndChangesNothing(t *testing.T) {
	f := newFixture(t)
	g := f.grant("migration", "op-1", http.StatusCreated)
	h := f.grant("failover-hold", "op-1", http.StatusCreated)
	for name, tc := range map[string]struct {
		kind    string
		token   string
		headers []string
		want    string
	}{
		"an unknown outcome": {kind: "migration", token: g.str("token"), headers: []string{"X-Deploy-Outcome", "fine"}, want: "must be"},
		"two outcomes": {kind: "migration", token: g.str("token"),
			headers: []string{"X-Deploy-Outcome", "succeeded", "X-Deploy-Outcome", "failed"}, want: "at most once"},
		"an outcome on a hold": {kind: "failover-hold", token: h.str("token"), headers: []string{"X-Deploy-Outcome", "succeeded"}, want: "migration lease only"},
	} {
		t.Run(name, func(t *testing.T) {
			r := f.do(http.MethodDelete, leasePath(tc.kind, "op-1"), f.token, nil, append([]string{"X-Lease-Token", tc.token}, tc.headers...)...)
			expectError(t, r, http.StatusBadRequest, "bad_request")
			if !strings.Contains(r.str("message"), tc.want) {
				t.Fatalf("message %q, want it to say %q", r.str("message"), tc.want)
			}
			expectRun(t, f.run("op-1"), bloodravenv1alpha1.DeployRunRunning, "pre-ddl", "")
		})
	}
	// Both leases are still live.
	f.renewPhase("op-1", g.str("token"), "pre-ddl")
}

func TestAReportAfterAnotherOperationTookTheMutexGoesToTheRun(t *testing.T) {
	f := newFixture(t)
	g := f.grant("migration", "op-1", http.StatusCreated)
	f.move(2)
	// Past the window in which op-1's record could still be a grant in
	// flight (leases.ConfirmWindow), op-2 takes the mutex: op-1 is revoked
	// first (its tombstone keeps its token's hash), then its record is
	// replaced.
	f.clock.Step(leases.ConfirmWindow)
	f.grant("migration", "op-2", http.StatusCreated)
	expectRun(t, f.run("op-1"), bloodravenv1alpha1.DeployRunRevoked, "pre-ddl", bloodravenv1alpha1.LeaseRevoked)

	// A token that is not op-1's reports nothing.
	other := f.grant("failover-hold", "op-2", http.StatusCreated)
	f.do(http.MethodDelete, leasePath("migration", "op-1"), f.token, nil, "X-Lease-Token", other.str("token"), "X-Deploy-Outcome", "succeeded")
	expectRun(t, f.run("op-1"), bloodravenv1alpha1.DeployRunRevoked, "pre-ddl", bloodravenv1alpha1.LeaseRevoked)

	// op-1's client, done with its fenced abort, reports it.
	if rr := f.do(http.MethodDelete, leasePath("migration", "op-1"), f.token, nil, "X-Lease-Token", g.str("token"),
		"X-Deploy-Outcome", "abort-failed"); rr.status != http.StatusNoContent {
		t.Fatalf("release: %d %s", rr.status, rr.raw)
	}
	r := f.run("op-1")
	expectRun(t, r, bloodravenv1alpha1.DeployRunAbortFailed, "pre-ddl", bloodravenv1alpha1.LeaseRevoked)
	if r.Status.RevokedAtGeneration != 2 {
		t.Fatalf("revokedAtGeneration %d, want 2", r.Status.RevokedAtGeneration)
	}
	expectRun(t, f.run("op-2"), bloodravenv1alpha1.DeployRunRunning, "pre-ddl", "")
}

func TestOneOperationMigratingTwoInstancesLeavesTwoRuns(t *testing.T) {
	f := newFixture(t)
	f.createDatabase(f.groupNS, "other-app", "playground", bloodravenv1alpha1.DeploymentClient{Namespace: f.clientNS, ServiceAccount: "deploy"})
	g := f.grant("migration", "op-1", http.StatusCreated)
	f.renewPhase("op-1", g.str("token"), "done")
	f.do(http.MethodDelete, leasePath("migration", "op-1"), f.token, nil, "X-Lease-Token", g.str("token"), "X-Deploy-Outcome", "succeeded")
	body := grantBody("migration", "op-1", 30)
	body["instance"] = "other-app"
	if r := f.do(http.MethodPost, groupPath+"/leases", f.token, body); r.status != http.StatusCreated && r.status != http.StatusOK {
		t.Fatalf("grant op-1 for other-app: %d %s", r.status, r.raw)
	}
	expectRun(t, f.run("op-1"), bloodravenv1alpha1.DeployRunSucceeded, "done", bloodravenv1alpha1.LeaseReleased)
	other := f.runFor("other-app", "op-1")
	if other.Spec.Instance != "other-app" || other.Status.Outcome != bloodravenv1alpha1.DeployRunRunning {
		t.Fatalf("other-app's run: %+v %+v", other.Spec, other.Status)
	}
}

// Issue 35, item 4 (docs/gate.md "a new tenure never rewrites an earlier
// DeployRun's recorded outcome"): op-1 fails and reports it; the pipeline
// re-runs op-1 under the same id. The re-run is a new tenure with a run of
// its own, and the first run keeps "failed". At e3e472e both tenures shared
// one run, and the re-run's grant turned "failed" back into "running".
func TestARerunOfAnOperationIDLeavesTheEarlierRunAlone(t *testing.T) {
	f := newFixture(t)
	g := f.grant("migration", "op-1", http.StatusCreated)
	if r := f.do(http.MethodDelete, leasePath("migration", "op-1"), f.token, nil, "X-Lease-Token", g.str("token"), "X-Deploy-Outcome", "failed"); r.status != http.StatusNoContent {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}
	first := f.run("op-1")
	expectRun(t, first, bloodravenv1alpha1.DeployRunFailed, "pre-ddl", bloodravenv1alpha1.LeaseReleased)

	f.clock.Step(time.Second)
	again := f.grant("migration", "op-1", http.StatusCreated)
	var got []bloodravenv1alpha1.DeployRun
	for _, r := range f.runs() {
		if r.Spec.OperationID == "op-1" {
			got = append(got, r)
		}
	}
	if len(got) != 2 {
		t.Fatalf("%d runs of op-1 after its re-run, want 2 (one per tenure)", len(got))
	}
	for _, r := range got {
		switch r.Name {
		case first.Name:
			expectRun(t, &r, bloodravenv1alpha1.DeployRunFailed, "pre-ddl", bloodravenv1alpha1.LeaseReleased)
		default:
			expectRun(t, &r, bloodravenv1alpha1.DeployRunRunning, "pre-ddl", "")
		}
	}
	if r := f.do(http.MethodDelete, leasePath("migration", "op-1"), f.token, nil, "X-Lease-Token", again.str("token"), "X-Deploy-Outcome", "succeeded"); r.status != http.StatusNoContent {
		t.Fatalf("release of the re-run: %d %s", r.status, r.raw)
	}
	expectRun(t, f.run("op-1"), bloodravenv1alpha1.DeployRunSucceeded, "pre-ddl", bloodravenv1alpha1.LeaseReleased)
	if r := f.runFor("counter-app", "op-1"); r.Name == first.Name {
		t.Fatal("the re-run's outcome went to the first run")
	}
}
