package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/internal/testenv"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// The operator binary fails over real MariaDB while every update of a
// deployment Lease is refused by the API server (a ValidatingAdmissionPolicy):
// lease bookkeeping fails on every pass, and the emergency path does not
// wait for it. The old lease is still fenced: its renewal answers 409.
func TestEmergencyFailoverOfRealMariaDBWhileLeaseUpdatesAreDenied(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	ctx := context.Background()
	p, cfg := upPlayground(t)
	admin, key, g := bootstrappedWithBudget(t, p, 5)
	c := deployClient(t, p)
	api := groupAPI(cfg.TLSAddr)
	st, mig := c.call(http.MethodPost, api+"/leases", map[string]any{"kind": "migration", "operationId": "op-1", "instance": devenv.DatabaseName, "ttlSeconds": 120})
	if st != http.StatusCreated {
		t.Fatalf("grant: %d %v", st, mig)
	}
	if st, body := c.call(http.MethodPost, api+"/leases", map[string]any{"kind": "failover-hold", "operationId": "op-1", "instance": devenv.DatabaseName, "ttlSeconds": 5}); st != http.StatusCreated {
		t.Fatalf("hold: %d %v", st, body)
	}

	testenv.DenyLeaseUpdates(t, ctx, admin, devenv.PlaygroundNamespace, leasestore.LabelDeployLease)
	time.Sleep(6 * time.Second) // the hold lapses: recording it is denied on every pass from now on

	took := killPrimaryAndWaitForPdx(t, p, siteObserver(t), admin, key, g)
	t.Logf("pdx promoted %v after iad was killed, with every deployment Lease update denied (budget 5 s, probe every 2 s)", took.Round(100*time.Millisecond))
	if took > 20*time.Second {
		t.Fatalf("promotion took %v: lease bookkeeping delayed the emergency path", took)
	}
	db, err := p.Sites[1].Root()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ro int
	if err := db.QueryRow("SELECT @@global.read_only").Scan(&ro); err != nil || ro != 0 {
		t.Fatalf("pdx read_only=%d (%v)", ro, err)
	}
	if st, body := c.call(http.MethodPut, api+"/leases/migration/op-1", map[string]any{"token": mig["token"]}); st != http.StatusConflict || body["error"] != "revoked" {
		t.Fatalf("the old mutex after the failover: %d %v", st, body)
	}
}
