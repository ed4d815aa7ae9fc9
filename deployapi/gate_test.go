package deployapi

import (
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/policy"
)

// renewPhase renews op's migration lease with token, reporting phase.
func (f *fixture) renewPhase(op, token, phase string) {
	f.t.Helper()
	r := f.do(http.MethodPut, leasePath("migration", op), f.token, map[string]any{"token": token, "phase": phase})
	if r.status != http.StatusOK || r.str("phase") != phase {
		f.t.Fatalf("renew %s with phase %s: %d %s", op, phase, r.status, r.raw)
	}
}

func (f *fixture) release(op, token string) {
	f.t.Helper()
	if r := f.do(http.MethodDelete, leasePath("migration", op), f.token, nil, "X-Lease-Token", token); r.status != http.StatusNoContent {
		f.t.Fatalf("release %s: %d %s", op, r.status, r.raw)
	}
}

func (f *fixture) database(name string) *bloodravenv1alpha1.MysqlDatabase {
	f.t.Helper()
	db := &bloodravenv1alpha1.MysqlDatabase{}
	if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.groupNS, Name: name}, db); err != nil {
		f.t.Fatal(err)
	}
	return db
}

// expectVerificationRequired checks a 409 verification_required naming op
// at generation.
func expectVerificationRequired(t *testing.T, r response, op string, generation int64) {
	t.Helper()
	expectError(t, r, http.StatusConflict, "verification_required")
	if r.str("operationId") != op || r.num("topologyGeneration") != float64(generation) {
		t.Fatalf("verification_required names %s at %v, want %s at %d: %s", r.str("operationId"), r.num("topologyGeneration"), op, generation, r.raw)
	}
}

// verify opens the gate as the database controller would on the
// annotation: the status the operator writes.
func (f *fixture) verify(op string) {
	f.t.Helper()
	db := f.database("counter-app")
	v := policy.OpenGate(db.Status, op, true, db.Generation, f.clock.Now())
	if !v.Opened {
		f.t.Fatalf("verifying %s opened nothing: %+v", op, db.Status)
	}
	db.Status = v.Status
	if err := env.Client.Status().Update(f.ctx, db); err != nil {
		f.t.Fatal(err)
	}
}

func TestAMigrationThatEndsPastItsDDLBoundaryGatesItsInstance(t *testing.T) {
	for _, end := range []struct {
		name string
		end  func(f *fixture, op, token string)
		want string // status.pendingVerification.ended
	}{
		{"released", func(f *fixture, op, token string) { f.release(op, token) }, "released"},
		{"expired", func(f *fixture, op, token string) { f.clock.Step(31 * time.Second) }, "expired"},
		{"revoked by a move", func(f *fixture, op, token string) { f.move(2) }, "revoked"},
	} {
		t.Run(end.name, func(t *testing.T) {
			f := newFixture(t)
			g := f.grant("migration", "op-1", http.StatusCreated)
			f.renewPhase("op-1", g.str("token"), "ddl")
			end.end(f, "op-1", g.str("token"))

			// The next migration of the instance is refused, and the gate
			// is recorded on the database before anything overwrites the
			// mutex.
			expectVerificationRequired(t, f.do(http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", "op-2", 30)), "op-1", 1)
			db := f.database("counter-app")
			p := db.Status.PendingVerification
			if p == nil || p.OperationID != "op-1" || p.TopologyGeneration != 1 || p.Ended != end.want {
				t.Fatalf("pendingVerification = %+v, want op-1 at 1, ended %s", p, end.want)
			}
			if !meta.IsStatusConditionTrue(db.Status.Conditions, policy.ConditionSchemaVerificationRequired) {
				t.Fatalf("conditions: %+v", db.Status.Conditions)
			}
			// The same operation's retry is refused too (revoked answers
			// its own revocation first).
			if end.want != "revoked" {
				expectVerificationRequired(t, f.do(http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", "op-1", 30)), "op-1", 1)
			}

			f.verify("op-1")
			r := f.grant("migration", "op-3", http.StatusCreated)
			f.renewPhase("op-3", r.str("token"), "done")
			f.release("op-3", r.str("token"))
			f.grant("migration", "op-4", http.StatusCreated)
		})
	}
}

func TestAMigrationThatEndsBeforeItsDDLBoundaryOrConfirmedGatesNothing(t *testing.T) {
	for _, phase := range []string{"pre-ddl", "done"} {
		t.Run(phase, func(t *testing.T) {
			f := newFixture(t)
			g := f.grant("migration", "op-1", http.StatusCreated)
			f.renewPhase("op-1", g.str("token"), phase)
			f.release("op-1", g.str("token"))
			f.grant("migration", "op-2", http.StatusCreated)
			if db := f.database("counter-app"); db.Status.PendingVerification != nil {
				t.Fatalf("gated after %s: %+v", phase, db.Status.PendingVerification)
			}
		})
	}
}

func TestAReGrantOfAnOperationInItsDDLIsRefused(t *testing.T) {
	f := newFixture(t)
	g := f.grant("migration", "op-1", http.StatusCreated)
	f.renewPhase("op-1", g.str("token"), "ddl")
	expectVerificationRequired(t, f.do(http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", "op-1", 30)), "op-1", 1)
	// The first runner keeps its lease: its DDL may still run.
	f.renewPhase("op-1", g.str("token"), "done")
	f.release("op-1", g.str("token"))
	f.grant("migration", "op-2", http.StatusCreated)
}

func TestAnotherInstanceTakesTheMutexOnlyOnceTheGateIsRecorded(t *testing.T) {
	f := newFixture(t)
	f.createDatabase(f.groupNS, "other-app", "playground", bloodravenv1alpha1.DeploymentClient{Namespace: f.clientNS, ServiceAccount: "deploy"})
	g := f.grant("migration", "op-1", http.StatusCreated)
	f.renewPhase("op-1", g.str("token"), "ddl")
	f.release("op-1", g.str("token"))

	body := grantBody("migration", "op-2", 30)
	body["instance"] = "other-app"
	if r := f.do(http.MethodPost, groupPath+"/leases", f.token, body); r.status != http.StatusCreated {
		t.Fatalf("the other instance's grant: %d %s", r.status, r.raw)
	}
	// The mutex no longer holds op-1's record; the database does.
	if p := f.database("counter-app").Status.PendingVerification; p == nil || p.OperationID != "op-1" {
		t.Fatalf("counter-app's gate: %+v", p)
	}
	if p := f.database("other-app").Status.PendingVerification; p != nil {
		t.Fatalf("other-app gated: %+v", p)
	}
	expectVerificationRequired(t, f.do(http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", "op-3", 30)), "op-1", 1)
}

// A run whose confirming "done" renewal was answered just before a move is
// fenced by the move (its release records a revocation) but not gated.
func TestAConfirmedRunRevokedByALaterMoveIsNotGated(t *testing.T) {
	f := newFixture(t)
	g := f.grant("migration", "op-1", http.StatusCreated)
	f.renewPhase("op-1", g.str("token"), "ddl")
	f.renewPhase("op-1", g.str("token"), "done")
	f.move(2)
	f.release("op-1", g.str("token")) // 204, and the revocation is recorded
	if rec := f.leaseRecord(t, "migration", "op-1"); rec == nil || rec.State != "revoked" || rec.Phase != "done" {
		t.Fatalf("the released record after the move: %+v", rec)
	}
	f.grant("migration", "op-2", http.StatusCreated)
	if p := f.database("counter-app").Status.PendingVerification; p != nil {
		t.Fatalf("gated: %+v", p)
	}
}
