package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/e2e/e2etest"
	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/internal/readonly"
)

// The deferral budget end to end (issue 24), on the operator binary and
// real MariaDB, with @@read_only sampled on both sites every 100 ms: a
// `deploy run` whose command never ends holds the mutex and the
// failover-hold; a planned failover with spec.maxDeferralSeconds 60 is
// Deferred, and the observation shows admission.budgetExhaustsAt; at half
// the budget DeferralBudgetWarning, at its end DeferralBudgetExhausted; the
// hold is revoked (deferral_budget_exhausted), the run stops its command
// and exits 4 (before its DDL boundary), and the failover completes with
// never two writable sites.
func TestTheDeferralBudgetEndsAHoldThatNeverLetsGo(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	p, cfg := upPlayground(t)
	admin, key, g := bootstrapped(t, p)
	ctx := context.Background()
	ro := readonly.Start(t, e2etest.SitesDSN(p))
	patch := client.MergeFrom(g.DeepCopy())
	g.Spec.MaxDeferralSeconds = ptr.To[int32](60)
	if err := admin.Patch(ctx, g, patch); err != nil {
		t.Fatal(err)
	}
	started := filepath.Join(t.TempDir(), "started")
	run := e2etest.StartDeployRun(t, p, cfg, []string{"--group", devenv.GroupName, "--instance", devenv.DatabaseName, "--ttl", "15"},
		"sh", "-c", `touch "$0" && exec sleep 600`, started)
	waitFor(t, 30*time.Second, func() bool { _, err := os.Stat(started); return err == nil })

	from := time.Now()
	requestPlannedFailover(t, admin, key, "budget-1", "pdx")
	var exhausts time.Time
	waitFor(t, 30*time.Second, func() bool {
		g = getGroup(t, admin, key)
		pf := g.Status.PlannedFailover
		if pf == nil || pf.Phase != bloodravenv1alpha1.PlannedFailoverPhaseDeferred || pf.Admission == nil || pf.Admission.BudgetExhaustsAt == nil {
			return false
		}
		exhausts = pf.Admission.BudgetExhaustsAt.Time
		return true
	})
	if d := exhausts.Sub(from); d < 55*time.Second || d > 65*time.Second {
		t.Fatalf("budgetExhaustsAt %v is %v after the request, want about 60 s", exhausts, d)
	}
	c := deployClient(t, p)
	st, body := c.call(http.MethodGet, groupAPI(cfg.TLSAddr), nil)
	if a, _ := body["admission"].(map[string]any); st != http.StatusOK || a["budgetExhaustsAt"] != exhausts.UTC().Format(time.RFC3339Nano) {
		t.Fatalf("the observation's admission: %d %v", st, body["admission"])
	}

	waitFor(t, 45*time.Second, func() bool { return slices.Contains(eventReasons(t, admin), "DeferralBudgetWarning") })
	if g = getGroup(t, admin, key); g.Status.ActiveSite != "iad" {
		t.Fatalf("moved before the budget was spent: %s", g.Status.ActiveSite)
	}
	run.WaitExit(t, 60*time.Second, 4, "the hold was revoked before the DDL boundary", "lost-before-ddl")
	if time.Now().Before(exhausts) {
		t.Fatalf("the run lost its hold at %v, before the budget ended at %v", time.Now(), exhausts)
	}
	waitFor(t, 60*time.Second, func() bool {
		g = getGroup(t, admin, key)
		return g.Status.ActiveSite == "pdx" && g.Status.PlannedFailover != nil && g.Status.PlannedFailover.Phase == bloodravenv1alpha1.PlannedFailoverPhaseCompleted
	})
	reasons := eventReasons(t, admin)
	for _, want := range []string{"DeferralBudgetExhausted", "DeploymentLeaseRevoked", "Promoted"} {
		if !slices.Contains(reasons, want) {
			t.Errorf("no %s event: %v", want, reasons)
		}
	}
	if len(g.Status.DeferralBudgets) != 0 {
		t.Errorf("the budget outlived its request: %+v", g.Status.DeferralBudgets)
	}
	ro.Stop()
	assertNoSplitBrain(t, ro, from, time.Now())
	t.Logf("deploy run output:\n%s", run.Output())
}
