package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/internal/mariadblocal"
	"github.com/shipstream/bloodraven/internal/scene"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
	mysqldriver "github.com/shipstream/bloodraven/topology/mysql"
)

// deployClient is the playground's pipeline: its deploy token, over TLS
// verified against the playground's CA.
func deployClient(t *testing.T, p *devenv.Playground) *tlsClient {
	t.Helper()
	token, err := os.ReadFile(p.Paths.DeployToken)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: playgroundTLS(t, p)}}
	return &tlsClient{t: t, token: string(token), hc: hc, api: scene.ForURL("", hc, string(token))}
}

// playgroundTLS verifies the playground's deployment API: its CA, and the
// name its certificate carries.
func playgroundTLS(t *testing.T, p *devenv.Playground) *tls.Config {
	t.Helper()
	caPEM, err := os.ReadFile(p.Paths.CACert)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	return &tls.Config{RootCAs: roots, ServerName: "localhost"}
}

// groupAPI is the playground group's deployment-API URL on the TLS
// listener at addr.
func groupAPI(addr string) string { return "https://" + addr + "/deploy/v1/groups/" + devenv.GroupName }

type tlsClient struct {
	t     *testing.T
	hc    *http.Client
	token string
	api   *scene.Client // hc with token; paths are whole URLs
}

// startFollower starts a second operator replica on free ports, stopped at
// the end of t, and checks that it answers 503 not_leader.
func startFollower(t *testing.T, p *devenv.Playground, cfg devenv.Config, c *tlsClient) (*devenv.Operator, devenv.Listeners) {
	t.Helper()
	l := devenv.Listeners{TLS: freeAddr(t), Aux: freeAddr(t), Metrics: freeAddr(t), Probe: freeAddr(t)}
	op, err := p.StartOperator(context.Background(), l, filepath.Join(cfg.StateDir, "operator-2.log"), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Stop)
	url := groupAPI(l.TLS)
	if st, body := c.call(http.MethodGet, url, nil); st != http.StatusServiceUnavailable || body["error"] != "not_leader" {
		t.Fatalf("follower: %d %v", st, body)
	}
	return op, l
}

// callPatiently is call, retried while the answer is 429 rate_limited, after
// its retryAfterSeconds, for up to 15 s: what a pipeline does. A test that
// checks state after its own clients have spent the identity's fair share
// (they share one ServiceAccount) uses it.
func (c *tlsClient) callPatiently(method, url string, body any, headers ...string) (int, map[string]any) {
	c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, out := c.call(method, url, body, headers...)
		if st != http.StatusTooManyRequests || time.Now().After(deadline) {
			return st, out
		}
		wait, _ := out["retryAfterSeconds"].(float64)
		time.Sleep(time.Duration(max(wait, 0.1) * float64(time.Second)))
	}
}

func (c *tlsClient) call(method, url string, body any, headers ...string) (int, map[string]any) {
	c.t.Helper()
	st, out, err := c.do(method, url, body, headers...)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, url, err)
	}
	return st, out
}

// tryCall is call for a server that may be down: a transport error is
// status 0.
func (c *tlsClient) tryCall(method, url string, body any, headers ...string) (int, map[string]any) {
	st, out, _ := c.do(method, url, body, headers...)
	return st, out
}

// do sends a request to url (scheme://host:port/path); a transport error
// is returned, an answer that is not JSON is not (its body is then nil).
func (c *tlsClient) do(method, url string, body any, headers ...string) (int, map[string]any, error) {
	st, out, err := c.doJSON(method, url, body, headers...)
	if errors.Is(err, scene.ErrNotJSON) {
		return st, nil, nil
	}
	return st, out, err
}

// doJSON is do for callers that hold the server to the contract: every
// answer but 204 is application/json with a JSON object body.
func (c *tlsClient) doJSON(method, url string, body any, headers ...string) (int, map[string]any, error) {
	r, err := c.api.Send(method, url, body, headers...)
	return r.Status, r.Body, err
}

// The deployment API through the operator binary, over the real TLS
// listener: a second replica is a follower and answers 503 not_leader; when
// the leader stops, the follower takes over and every lease and tombstone
// the first one wrote is still in force.
func TestDeployAPIOverTLSAcrossLeaderChange(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	ctx := context.Background()
	p, cfg := upPlayground(t)
	c := deployClient(t, p)

	leader := groupAPI(cfg.TLSAddr)
	if st, body := c.call(http.MethodGet, leader, nil); st != http.StatusOK || body["group"] != devenv.GroupName {
		t.Fatalf("GET over TLS: %d %v", st, body)
	}
	st, grant := c.call(http.MethodPost, leader+"/leases", map[string]any{"kind": "migration", "operationId": "op-1", "instance": devenv.DatabaseName})
	if st != http.StatusCreated {
		t.Fatalf("grant: %d %v", st, grant)
	}
	leaseToken, _ := grant["token"].(string)

	// A planned failover moves the MariaDB primary, bumps the generation and
	// fences op-1; its tombstone is written by the leader.
	admin, err := client.New(p.AdminConfig, client.Options{Scheme: bloodravenscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	g := &bloodravenv1alpha1.MysqlFailoverGroup{}
	key := client.ObjectKey{Namespace: devenv.PlaygroundNamespace, Name: devenv.GroupName}
	waitFor(t, 30*time.Second, func() bool { _ = admin.Get(ctx, key, g); return g.Status.TopologyGeneration == 1 })
	startGen := g.Status.TopologyGeneration
	patch := client.MergeFrom(g.DeepCopy())
	g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: "e2e-1", TargetSite: "pdx"}
	if err := admin.Patch(ctx, g, patch); err != nil { // a merge patch: the operator writes the group too
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() bool {
		_ = admin.Get(ctx, key, g)
		return g.Status.TopologyGeneration == startGen+1 && g.Status.ActiveSite == "pdx"
	})
	t.Logf("planned failover iad -> pdx: %+v", g.Status.PlannedFailover)
	// The writable MariaDB primary really moved, and carries the fence.
	readOnly := func(s *mariadblocal.Server) int {
		db, err := s.Root()
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var ro int
		if err := db.QueryRow("SELECT @@global.read_only").Scan(&ro); err != nil {
			t.Fatal(err)
		}
		return ro
	}
	if readOnly(p.Sites[0]) != 1 || readOnly(p.Sites[1]) != 0 {
		t.Fatalf("read_only iad=%d pdx=%d, want iad fenced and pdx writable", readOnly(p.Sites[0]), readOnly(p.Sites[1]))
	}
	pdxDB, err := p.Sites[1].Root()
	if err != nil {
		t.Fatal(err)
	}
	defer pdxDB.Close()
	var fenceGen int64
	var fenceSite string
	if err := pdxDB.QueryRow(mysqldriver.FenceQuery).Scan(&fenceGen, &fenceSite); err != nil || fenceGen != startGen+1 || fenceSite != "pdx" {
		t.Fatalf("fence on pdx = %d %q %v", fenceGen, fenceSite, err)
	}
	if st, body := c.call(http.MethodPut, leader+"/leases/migration/op-1", map[string]any{"token": leaseToken}); st != http.StatusConflict || body["error"] != "revoked" {
		t.Fatalf("renew across the bump: %d %v", st, body)
	}
	st, grant2 := c.call(http.MethodPost, leader+"/leases", map[string]any{"kind": "migration", "operationId": "op-2", "instance": devenv.DatabaseName})
	if st != http.StatusCreated {
		t.Fatalf("grant op-2: %d %v", st, grant2)
	}

	// A second replica: ready, not leader, and it says so.
	second, l2 := startFollower(t, p, cfg, c)

	// The leader stops (releasing its lease); the follower takes over.
	start := time.Now()
	p.Operator().Stop()
	if err := p.WaitLeader(ctx, second, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("follower took over %v after the leader stopped", time.Since(start).Round(time.Millisecond))
	next := groupAPI(l2.TLS)
	if st, body := c.call(http.MethodPut, next+"/leases/migration/op-2", map[string]any{"token": grant2["token"]}); st != http.StatusOK {
		t.Fatalf("renew op-2 on the new leader: %d %v", st, body)
	}
	if st, body := c.call(http.MethodPost, next+"/leases", map[string]any{"kind": "migration", "operationId": "op-1", "instance": devenv.DatabaseName}); st != http.StatusConflict || body["error"] != "revoked" || body["reason"] != "topology_changed" {
		t.Fatalf("tombstoned op-1 on the new leader: %d %v", st, body)
	}
	if st, body := c.call(http.MethodPost, next+"/leases", map[string]any{"kind": "migration", "operationId": "op-3", "instance": devenv.DatabaseName}); st != http.StatusConflict || body["error"] != "held" {
		t.Fatalf("mutex on the new leader: %d %v", st, body)
	}
}

// grantMutexAndHold takes the migration mutex and a failover-hold for
// operation op on the playground's database, and returns their tokens in
// that order.
func (c *tlsClient) grantMutexAndHold(api, op string, ttlSeconds int) []string {
	c.t.Helper()
	var tokens []string
	for _, kind := range []string{"migration", "failover-hold"} {
		st, grant := c.call(http.MethodPost, api+"/leases", map[string]any{"kind": kind, "operationId": op, "instance": devenv.DatabaseName, "ttlSeconds": ttlSeconds})
		if st != http.StatusCreated {
			c.t.Fatalf("grant %s: %d %v", kind, st, grant)
		}
		tokens = append(tokens, grant["token"].(string))
	}
	return tokens
}
