package e2e

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/devenv"
)

// The spec's quiz, on the binaries: a failover-hold is taken, a planned
// failover waits behind it, the operator is killed (SIGKILL, a crash). The
// playground restarts it, as a Deployment would, with its state kept; the
// restarted leader still defers the failover until the hold's unrenewed TTL
// runs out, and then the failover proceeds by itself.
func TestHoldSurvivesAnOperatorCrash(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	ctx := context.Background()
	p, cfg := upPlayground(t)
	c := deployClient(t, p)
	api := groupAPI(cfg.TLSAddr)
	admin, key, g := bootstrapped(t, p)

	const holdTTL = 45 * time.Second
	if st, body := c.call(http.MethodPost, api+"/leases", map[string]any{"kind": "migration", "operationId": "op-quiz", "instance": devenv.DatabaseName, "ttlSeconds": 120}); st != http.StatusCreated {
		t.Fatalf("mutex: %d %v", st, body)
	}
	st, hold := c.call(http.MethodPost, api+"/leases", map[string]any{"kind": "failover-hold", "operationId": "op-quiz", "instance": devenv.DatabaseName, "ttlSeconds": int(holdTTL.Seconds())})
	if st != http.StatusCreated {
		t.Fatalf("hold: %d %v", st, hold)
	}
	holdExpiry, err := time.Parse(time.RFC3339Nano, hold["expiresAt"].(string))
	if err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(g.DeepCopy())
	g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: "quiz-1", TargetSite: "pdx"}
	if err := admin.Patch(ctx, g, patch); err != nil {
		t.Fatal(err)
	}
	deferred := func() bool {
		pf := g.Status.PlannedFailover
		return pf != nil && pf.Phase == bloodravenv1alpha1.PlannedFailoverPhaseDeferred && pf.Admission != nil && pf.Admission.DeferReason == bloodravenv1alpha1.DeferReasonDeploymentHold
	}
	waitFor(t, 30*time.Second, func() bool { _ = admin.Get(ctx, key, g); return deferred() })

	crashed := p.Operator()
	killedAt := time.Now()
	if err := crashed.Kill(); err != nil {
		t.Fatal(err)
	}
	restarted, err := p.WaitRestart(ctx, 0, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if restarted.Pid() == crashed.Pid() {
		t.Fatal("the same process after a restart")
	}
	if pid, _ := os.ReadFile(p.Paths.OperatorPID); strings.TrimSpace(string(pid)) != strconv.Itoa(restarted.Pid()) {
		t.Fatalf("%s holds %q; the running operator is %d", p.Paths.OperatorPID, pid, restarted.Pid())
	}
	if err := p.WaitLeader(ctx, restarted, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILL to a leading restarted operator: %v (the old leader's Lease lapses first)", time.Since(killedAt).Round(time.Millisecond))
	if time.Now().After(holdExpiry.Add(-5 * time.Second)) {
		t.Fatalf("the restart took until %v; the hold (expiring %v) leaves nothing to observe", time.Now(), holdExpiry)
	}
	// The restarted leader reads the hold from the API server: it still
	// defers, generation and site unchanged, until the hold's expiry.
	if st, body := c.call(http.MethodGet, api, nil); st != http.StatusOK || len(body["leases"].([]any)) != 2 {
		t.Fatalf("after the restart: %d %v", st, body)
	}
	for time.Now().Before(holdExpiry.Add(-time.Second)) {
		if err := admin.Get(ctx, key, g); err != nil {
			t.Fatal(err)
		}
		if !deferred() || g.Status.TopologyGeneration != 1 || g.Status.ActiveSite != "iad" {
			t.Fatalf("%v before the hold's expiry: planned failover %+v, generation %d, site %s",
				time.Until(holdExpiry).Round(time.Millisecond), g.Status.PlannedFailover, g.Status.TopologyGeneration, g.Status.ActiveSite)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Unrenewed, the hold lapses and the failover proceeds by itself.
	waitFor(t, 60*time.Second, func() bool {
		_ = admin.Get(ctx, key, g)
		return g.Status.TopologyGeneration == 2 && g.Status.ActiveSite == "pdx"
	})
	t.Logf("failover completed %v after the hold's expiry", time.Since(holdExpiry).Round(time.Millisecond))
	if p.Restarts() != 1 {
		t.Fatalf("%d restarts, want 1", p.Restarts())
	}
}
