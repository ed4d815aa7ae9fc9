package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/devenv"
)

// Two operator replicas; the leader dies by SIGKILL (it releases nothing).
// Until its leader-election Lease lapses no replica serves; then one does
// (the follower, or the leader's restarted self: the playground restarts a
// dying operator as a Deployment would). Every lease and tombstone is still
// in force on the new leader. The handover time is measured.
func TestLeaderKilledFollowerTakesOver(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	ctx := context.Background()
	p, cfg := upPlayground(t)
	c := deployClient(t, p)
	leader := groupAPI(cfg.TLSAddr)
	grant := func(url, op string) (int, map[string]any) {
		return c.call(http.MethodPost, url+"/leases", map[string]any{"kind": "migration", "operationId": op, "instance": devenv.DatabaseName, "ttlSeconds": 120})
	}

	// op-0 is revoked by the operator (a tombstone); op-1 holds the mutex.
	if st, body := grant(leader, "op-0"); st != http.StatusCreated {
		t.Fatalf("grant op-0: %d %v", st, body)
	}
	admin, _, g := bootstrapped(t, p)
	patch := client.MergeFrom(g.DeepCopy())
	g.Annotations = map[string]string{bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation: "true"}
	if err := admin.Patch(ctx, g, patch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() bool {
		st, body := grant(leader, "op-0")
		return st == http.StatusConflict && body["error"] == "revoked" && body["reason"] == "operator_revoked"
	})
	// Grants answer 423 until the operator has removed the annotation
	// (after the tombstone above): retry those.
	var st int
	var held map[string]any
	waitFor(t, 30*time.Second, func() bool {
		st, held = grant(leader, "op-1")
		return st != http.StatusLocked
	})
	if st != http.StatusCreated {
		t.Fatalf("grant op-1: %d %v", st, held)
	}

	_, l2 := startFollower(t, p, cfg, c)
	follower := groupAPI(l2.TLS)

	if err := p.Operator().Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var next string
	waitFor(t, 60*time.Second, func() bool {
		for _, url := range []string{follower, leader} {
			if st, _ := c.tryCall(http.MethodGet, url, nil); st == http.StatusOK {
				next = url
				return true
			}
		}
		return false
	})
	handover := time.Since(killed)
	who := "the follower"
	if next == leader {
		who = "the restarted leader"
	}
	t.Logf("handover after SIGKILL of the leader: %v, to %s (leader-election Lease 15 s)", handover.Round(time.Millisecond), who)

	if st, body := c.call(http.MethodPut, next+"/leases/migration/op-1", map[string]any{"token": held["token"]}); st != http.StatusOK {
		t.Fatalf("renew op-1 on the new leader: %d %v", st, body)
	}
	if st, body := grant(next, "op-0"); st != http.StatusConflict || body["error"] != "revoked" || body["reason"] != "operator_revoked" {
		t.Fatalf("tombstoned op-0 on the new leader: %d %v", st, body)
	}
	if st, body := grant(next, "op-2"); st != http.StatusConflict || body["error"] != "held" {
		t.Fatalf("mutex on the new leader: %d %v", st, body)
	}
}
