package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/devenv"
	"github.com/shipstream/bloodraven/leasestore"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
	"github.com/shipstream/bloodraven/testenv"
	mysqldriver "github.com/shipstream/bloodraven/topology/mysql"
)

// The operator binary fails over real MariaDB while every update of a
// deployment Lease is refused by the API server (a ValidatingAdmissionPolicy):
// lease bookkeeping fails on every pass, and the emergency path does not
// wait for it. The old lease is still fenced: its renewal answers 409.
func TestEmergencyFailoverOfRealMariaDBWhileLeaseUpdatesAreDenied(t *testing.T) {
	ctx := context.Background()
	p, cfg := upPlayground(t)
	admin, err := client.New(p.AdminConfig, client.Options{Scheme: bloodravenscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: devenv.PlaygroundNamespace, Name: devenv.GroupName}
	g := &v1.MysqlFailoverGroup{}
	waitFor(t, 30*time.Second, func() bool { _ = admin.Get(ctx, key, g); return g.Status.TopologyGeneration == 1 })
	patch := client.MergeFrom(g.DeepCopy())
	g.Spec.FailureDetectionSeconds = 5
	if err := admin.Patch(ctx, g, patch); err != nil {
		t.Fatal(err)
	}

	caPEM, err := os.ReadFile(p.Paths.CACert)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	token, err := os.ReadFile(p.Paths.DeployToken)
	if err != nil {
		t.Fatal(err)
	}
	c := &tlsClient{t: t, token: string(token), hc: &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost"}}}}
	api := "https://" + cfg.TLSAddr + "/deploy/v1/groups/" + devenv.GroupName
	st, mig := c.call(http.MethodPost, api+"/leases", map[string]any{"kind": "migration", "operationId": "op-1", "instance": devenv.DatabaseName, "ttlSeconds": 120})
	if st != http.StatusCreated {
		t.Fatalf("grant: %d %v", st, mig)
	}
	if st, body := c.call(http.MethodPost, api+"/leases", map[string]any{"kind": "failover-hold", "operationId": "op-1", "instance": devenv.DatabaseName, "ttlSeconds": 5}); st != http.StatusCreated {
		t.Fatalf("hold: %d %v", st, body)
	}

	testenv.DenyLeaseUpdates(t, ctx, admin, devenv.PlaygroundNamespace, leasestore.LabelDeployLease)
	time.Sleep(6 * time.Second) // the hold lapses: recording it is denied on every pass from now on

	probe := mysqldriver.New(func(context.Context, *v1.MysqlFailoverGroup) (string, string, error) {
		return devenv.MySQLUser, devenv.MySQLPassword, nil
	})
	defer probe.Close()
	waitFor(t, 30*time.Second, func() bool {
		gtids, _ := probe.GTIDs(ctx, g)
		return gtids["iad"] != "" && gtids["iad"] == gtids["pdx"]
	})
	p.Sites[0].Kill() // iad, the primary
	killed := time.Now()
	waitFor(t, 60*time.Second, func() bool {
		_ = admin.Get(ctx, key, g)
		return g.Status.ActiveSite == "pdx" && g.Status.TopologyGeneration == 2
	})
	took := time.Since(killed)
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
