package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shipstream/bloodraven/e2e/e2etest"
	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/internal/faultproxy"
	"github.com/shipstream/bloodraven/internal/readonly"
)

// The operator's own writes never wait on its own webhooks (docs/fence.md,
// "Invariants"), end to end: the API server calls the playground's
// webhooks through a fault proxy, which is black-holed (connections
// accepted, never answered) as a replica lost with its node is while it
// stays in the webhooks' Service. A person's status edit then fails closed;
// iad's mariadbd is killed under a 5-s detection budget, and the operator,
// whose transition and promotion are status writes, promotes pdx within the
// budget + 10 s: pdx answers read_only=0 (sampled every 100 ms) by then,
// the fence is at generation 2, and no sample shows two writable sites.
func TestEmergencyFailoverWhileTheWebhooksAreBlackHoled(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	const budget = 5 * time.Second
	ctx := context.Background()
	var proxy *faultproxy.Proxy
	p, _ := e2etest.PlaygroundWith(t, func(cfg *devenv.Config) {
		px, err := faultproxy.New(cfg.TLSAddr) // the operator's TLS listener, where the webhooks are served
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = px.Close() }) // after the playground is down
		proxy = px
		cfg.WebhookAddr = px.Addr()
	})
	admin, key, g := bootstrappedWithBudget(t, p, int32(budget/time.Second)) // through the webhooks, still passing
	probe := siteObserver(t)
	ro, from := readonly.Start(t, e2etest.SitesDSN(p)), time.Now()

	proxy.SetMode(faultproxy.BlackHole)
	start := time.Now()
	err := admin.Status().Patch(ctx, g.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"status":{"topologyGeneration":7}}`)))
	if err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Fatalf("a person's status edit with the webhooks black-holed: err = %v, want it refused for want of an answer", err)
	}
	t.Logf("a person's status edit failed closed after %v: %v", time.Since(start).Round(time.Millisecond), err)

	took := killPrimaryAndWaitForPdx(t, p, probe, admin, key, g)
	killed := time.Now().Add(-took)
	t.Logf("pdx promoted %v after iad was killed, with the webhooks black-holed (detection budget %v)", took.Round(100*time.Millisecond), budget)
	if limit := budget + 10*time.Second; took > limit {
		t.Fatalf("pdx promoted %v after iad was killed, want within the budget + 10 s (%v)", took.Round(100*time.Millisecond), limit)
	}
	waitFor(t, 10*time.Second, func() bool { _, ok := firstWritable(ro, "pdx", killed); return ok })
	at, _ := firstWritable(ro, "pdx", killed)
	if opened := at.Sub(killed); opened > budget+10*time.Second {
		t.Fatalf("pdx answered read_only=0 %v after iad was killed, want within the budget + 10 s", opened.Round(100*time.Millisecond))
	}
	t.Logf("pdx answered read_only=0 %v after iad was killed", at.Sub(killed).Round(100*time.Millisecond))
	ro.Stop()
	assertNoSplitBrain(t, ro, from, time.Now())
}
