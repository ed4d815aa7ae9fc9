package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/internal/testenv"
)

// Defect 2 of issue 19, end to end with the operator binary and real
// MariaDB: a lease that ends between the move and its bookkeeping is still
// revoked. A ValidatingAdmissionPolicy refuses tombstones while a planned
// failover moves the primary, so nobody can write the revocation; the
// lease is then released (case A) or lapses (case B) after the move. Once
// tombstones are allowed again, the operation is tombstoned, its re-grant
// answers 409 revoked (topology_changed), and DeploymentLeaseRevoked names it
// exactly once. At b60db83 the release answered 204 and wrote "released", and
// the re-grant was 201 at the new generation.
func TestALeaseEndingBetweenTheMoveAndItsBookkeepingIsRevoked(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	ctx := context.Background()
	p, cfg := upPlayground(t)
	admin, key, g := bootstrapped(t, p)
	c := deployClient(t, p)
	api := groupAPI(cfg.TLSAddr)
	move := func(id, target string) {
		t.Helper()
		if err := admin.Get(ctx, key, g); err != nil {
			t.Fatal(err)
		}
		gen := g.Status.TopologyGeneration
		patch := client.MergeFrom(g.DeepCopy())
		g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: id, TargetSite: target}
		if err := admin.Patch(ctx, g, patch); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, func() bool {
			_ = admin.Get(ctx, key, g)
			return g.Status.TopologyGeneration == gen+1 && g.Status.ActiveSite == target
		})
	}
	grant := func(op string, ttl int) string {
		t.Helper()
		st, body := c.call(http.MethodPost, api+"/leases", map[string]any{"kind": "migration", "operationId": op, "instance": devenv.DatabaseName, "ttlSeconds": ttl})
		if st != http.StatusCreated {
			t.Fatalf("grant %s: %d %v", op, st, body)
		}
		return body["token"].(string)
	}
	regrantIsRevoked := func(op string) {
		t.Helper()
		var st int
		var body map[string]any
		waitFor(t, 30*time.Second, func() bool {
			st, body = c.call(http.MethodPost, api+"/leases", map[string]any{"kind": "migration", "operationId": op, "instance": devenv.DatabaseName, "ttlSeconds": 30})
			return st == http.StatusConflict && body["error"] == "revoked"
		})
		if body["reason"] != "topology_changed" || body["topologyGeneration"] != float64(g.Status.TopologyGeneration) {
			t.Fatalf("re-grant of %s: %d %v", op, st, body)
		}
	}
	revokedEvents := func(op string) int {
		var events corev1.EventList
		if err := admin.List(ctx, &events, client.InNamespace(devenv.PlaygroundNamespace)); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range events.Items {
			if e.Reason == "DeploymentLeaseRevoked" && strings.Contains(e.Message, op) {
				n += int(e.Count)
			}
		}
		return n
	}

	// A: released after the move.
	tokA := grant("m2-x", 120)
	allow := testenv.DenyTombstones(t, ctx, admin, devenv.PlaygroundNamespace)
	move("move-a", "pdx")
	st, body := c.call(http.MethodDelete, api+"/leases/migration/m2-x", nil, "X-Lease-Token", tokA)
	t.Logf("release after the move while tombstones are refused: %d %v", st, body)
	if st != http.StatusServiceUnavailable || body["error"] != "unavailable" {
		t.Fatalf("the release after the move, its revocation refused: %d %v, want 503 unavailable (never 204 released)", st, body)
	}
	allow()
	regrantIsRevoked("m2-x")
	if st, body := c.call(http.MethodDelete, api+"/leases/migration/m2-x", nil, "X-Lease-Token", tokA); st != http.StatusNoContent {
		t.Fatalf("the retried release: %d %v", st, body)
	}

	// B: lapsed after the move.
	grant("lapse-1", 5)
	allow = testenv.DenyTombstones(t, ctx, admin, devenv.PlaygroundNamespace)
	move("move-b", "iad")
	time.Sleep(6 * time.Second) // the lease lapses after the move, before anyone could revoke it
	allow()
	regrantIsRevoked("lapse-1")

	// Each revocation is announced exactly once.
	for _, op := range []string{"m2-x", "lapse-1"} {
		op := op
		waitFor(t, 30*time.Second, func() bool { return revokedEvents(op) >= 1 })
	}
	time.Sleep(3 * time.Second) // a second announcement would come with the next reconciles
	for _, op := range []string{"m2-x", "lapse-1"} {
		if n := revokedEvents(op); n != 1 {
			t.Fatalf("DeploymentLeaseRevoked named %s %d times, want once", op, n)
		}
	}
	t.Logf("both operations revoked and announced once; generation %d", g.Status.TopologyGeneration)
}
