package deployapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/shipstream/bloodraven/deployapi/authn"
	"github.com/shipstream/bloodraven/leases"
)

// Two operations race for the mutex, 50 times: exactly one 201 each time,
// the other 409 held. Every other round races over an existing, released
// mutex object (the resourceVersion-precondition path), the first round over
// no object at all (the create-conflict path). Two Server instances with
// separate token caches stand in for two replicas: the exclusion comes from
// the API server, not from anything in process.
func TestConcurrentMigrationGrantsExactlyOneWins(t *testing.T) {
	f := newFixture(t)
	other := f.newServer()
	servers := []*Server{f.srv, other}
	const rounds = 50
	for round := 0; round < rounds; round++ {
		var wg sync.WaitGroup
		results := make([]response, 2)
		start := make(chan struct{})
		for i := 0; i < 2; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				<-start
				op := []string{"left", "right"}[i] + "-" + strings.Repeat("x", round%3)
				results[i] = f.doWith(servers[i], http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", op, 30))
			}(i)
		}
		close(start)
		wg.Wait()
		created, held := 0, 0
		var winner response
		for _, r := range results {
			switch {
			case r.status == http.StatusCreated:
				created++
				winner = r
			case r.status == http.StatusConflict && r.str("error") == "held":
				held++
			default:
				t.Fatalf("round %d: unexpected %d %s", round, r.status, r.raw)
			}
		}
		if created != 1 || held != 1 {
			t.Fatalf("round %d: %d created, %d held; want exactly one of each", round, created, held)
		}
		rel := f.do(http.MethodDelete, leasePath("migration", winner.str("operationId")), f.token, nil, "X-Lease-Token", winner.str("token"))
		if rel.status != http.StatusNoContent {
			t.Fatalf("round %d: release %d %s", round, rel.status, rel.raw)
		}
	}
}

// A new Server (as after an operator restart: new token cache, no memory of
// earlier requests) against the same API server keeps every lease and
// tombstone.
func TestRestartKeepsLeasesAndTombstones(t *testing.T) {
	f := newFixture(t)
	f.grant("migration", "gone", http.StatusCreated)
	if revoked, err := f.store.Revoke(f.ctx, f.group, "gone", leases.ReasonOperatorRevoked); err != nil || len(revoked.Records) != 1 {
		t.Fatalf("revoke: %v %v", revoked, err)
	}
	m := f.grant("migration", "op-1", http.StatusCreated)
	h := f.grant("failover-hold", "op-1", http.StatusCreated)
	restarted := f.newServer()
	f.clock.Step(10 * time.Second)
	for kind, tok := range map[string]string{"migration": m.str("token"), "failover-hold": h.str("token")} {
		if r := f.doWith(restarted, http.MethodPut, leasePath(kind, "op-1"), f.token, map[string]any{"token": tok}); r.status != http.StatusOK {
			t.Fatalf("renew %s after restart: %d %s", kind, r.status, r.raw)
		}
	}
	expectError(t, f.doWith(restarted, http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", "op-2", nil)), 409, "held")
	r := f.doWith(restarted, http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", "gone", nil))
	expectError(t, r, 409, "revoked")
	if r.str("reason") != "operator_revoked" {
		t.Fatalf("tombstone reason after restart: %s", r.raw)
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// countingKube returns a clientset that counts TokenReview requests.
func countingKube(t *testing.T, n *atomic.Int64) kubernetes.Interface {
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if strings.Contains(req.URL.Path, "/tokenreviews") {
				n.Add(1)
			}
			return rt.RoundTrip(req)
		})
	})
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestTokenReviewCache(t *testing.T) {
	f := newFixture(t)
	var reviews atomic.Int64
	a := authn.New(countingKube(t, &reviews).AuthenticationV1().TokenReviews(), "bloodraven-deploy", f.clock, authn.DefaultCacheTTL, 2)
	req := func(token string) error {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Authorization", "Bearer "+token)
		_, err := a.Authenticate(context.Background(), r)
		return err
	}
	if err := req(f.token); err != nil {
		t.Fatal(err)
	}
	if err := req(f.token); err != nil || reviews.Load() != 1 {
		t.Fatalf("second request: err=%v, %d reviews; want a cache hit", err, reviews.Load())
	}
	f.clock.Step(authn.DefaultCacheTTL)
	if err := req(f.token); err != nil || reviews.Load() != 2 {
		t.Fatalf("after 15 s: err=%v, %d reviews; want a new review", err, reviews.Load())
	}
	t.Run("a refused token is reviewed once per refusal window; a wrong audience and text that is no JWT never", func(t *testing.T) {
		// The real token's claims (our audience, the cluster's issuer, a
		// future exp) under a forged signature: only a review can refuse it.
		parts := strings.Split(f.token, ".")
		bogus := parts[0] + "." + parts[1] + ".Zm9yZ2Vk"
		wrongAudience := f.serviceAccountToken(f.clientNS, "deploy", "another-audience") // real, for the wrong audience
		before := reviews.Load()
		for i := 0; i < 3; i++ {
			if err := req(wrongAudience); err != authn.ErrUnauthenticated {
				t.Fatalf("wrong-audience token: %v", err)
			}
		}
		for i := 0; i < 3; i++ {
			if err := req(bogus); err != authn.ErrUnauthenticated {
				t.Fatalf("wrong-audience token: %v", err)
			}
			if err := req("not-a-jwt"); err != authn.ErrUnauthenticated {
				t.Fatalf("non-JWT token: %v", err)
			}
		}
		if got := reviews.Load() - before; got != 1 {
			t.Fatalf("%d reviews for 9 failing requests, want 1 (the forged signature's)", got)
		}
		f.clock.Step(authn.RefusedTTL)
		if err := req(bogus); err != authn.ErrUnauthenticated || reviews.Load()-before != 2 {
			t.Fatalf("after the refusal window: err=%v, %d reviews; want a new review", err, reviews.Load()-before)
		}
	})
	t.Run("the cache is bounded and evicts the least recently used", func(t *testing.T) {
		t1 := f.serviceAccountToken(f.clientNS, "deploy", "bloodraven-deploy")
		t2 := f.serviceAccountToken(f.clientNS, "deploy", "bloodraven-deploy")
		for _, tok := range []string{f.token, t1, t2} { // size 2: f.token is evicted
			if err := req(tok); err != nil {
				t.Fatal(err)
			}
		}
		before := reviews.Load()
		for _, tok := range []string{t1, t2} { // the two entries the bound keeps
			if err := req(tok); err != nil || reviews.Load() != before {
				t.Fatalf("a cached token: err=%v, reviews %d -> %d", err, before, reviews.Load())
			}
		}
		if err := req(f.token); err != nil || reviews.Load() != before+1 {
			t.Fatalf("evicted token: err=%v, reviews %d -> %d", err, before, reviews.Load())
		}
	})
}

// No lease token, token hash or bearer token appears in logs or metrics, and
// no lease token in any stored object.
func TestSecretsNeverLeak(t *testing.T) {
	f := newFixture(t)
	m := f.grant("migration", "op-1", http.StatusCreated)
	f.grant("failover-hold", "op-1", http.StatusCreated)
	f.grant("migration", "op-1", http.StatusOK)
	f.do(http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": m.str("token")}) // stale token
	f.do(http.MethodDelete, leasePath("migration", "op-1"), f.token, nil, "X-Lease-Token", "wrong")
	if _, err := f.store.Revoke(f.ctx, f.group, "op-1", leases.ReasonOperatorRevoked); err != nil {
		t.Fatal(err)
	}
	f.do(http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", "op-1", nil))

	var secrets []string
	for _, tok := range f.leaseTokens {
		secrets = append(secrets, tok, leases.HashToken(tok))
	}
	secrets = append(secrets, f.token)
	if len(f.leaseTokens) < 3 {
		t.Fatalf("only %d lease tokens issued", len(f.leaseTokens))
	}

	logs := strings.Join(f.logs.all(), "\n")
	metricsText := gatherText(t, f.reg)
	for _, s := range secrets {
		if strings.Contains(logs, s) {
			t.Errorf("a secret appears in the logs")
		}
		if strings.Contains(metricsText, s) {
			t.Errorf("a secret appears in the metrics")
		}
	}
	objects, err := json.Marshal(f.leaseObjects())
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range append(f.leaseTokens, f.token) {
		if strings.Contains(string(objects), tok) {
			t.Errorf("a token is stored in clear in a Lease object")
		}
	}
}

func gatherText(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

func TestOneLogLinePerRequestWithTheContractFields(t *testing.T) {
	f := newFixture(t)
	f.grant("migration", "op-1", http.StatusCreated)
	lines := f.logs.all()
	if len(lines) != 1 {
		t.Fatalf("%d log lines for one request: %v", len(lines), lines)
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"msg": "deploy api", "handler": "grant", "group": "playground", "instance": "counter-app",
		"namespace": f.groupNS, "operationId": "op-1", "status": float64(201)}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("log field %s = %v, want %v", k, line[k], v)
		}
	}
	if _, ok := line["duration_ms"].(float64); !ok {
		t.Errorf("duration_ms missing or not a number: %v", line["duration_ms"])
	}
}

func TestMetrics(t *testing.T) {
	f := newFixture(t)
	strangerNS := env.Namespace(t)
	stranger := f.serviceAccountToken(strangerNS, "deploy", "bloodraven-deploy")
	if text := gatherText(t, f.reg); !strings.Contains(text, `bloodraven_deploy_leases_active{group="playground",kind="migration",namespace="`+f.groupNS+`"} 0`) {
		t.Errorf("a group without leases does not report 0:\n%s", text)
	}
	f.grant("migration", "op-1", http.StatusCreated)
	f.grant("failover-hold", "op-1", http.StatusCreated)
	f.do(http.MethodGet, "/deploy/v1/groups/made-up-group-name", stranger, nil)
	f.do(http.MethodGet, groupPath, stranger, nil)
	f.do(http.MethodGet, groupPath+"?namespace=made-up-namespace", stranger, nil)

	// The active-lease gauges count the lease cache, which follows a grant
	// by a watch event: wait for both (CI once gathered before the hold's
	// event arrived).
	active := []string{
		`bloodraven_deploy_leases_active{group="playground",kind="migration",namespace="` + f.groupNS + `"} 1`,
		`bloodraven_deploy_leases_active{group="playground",kind="failover-hold",namespace="` + f.groupNS + `"} 1`,
	}
	var text string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		text = gatherText(t, f.reg)
		if strings.Contains(text, active[0]) && strings.Contains(text, active[1]) || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range []string{
		`bloodraven_deploy_api_requests_total{group="playground",handler="grant",namespace="` + f.groupNS + `",status="201"} 2`,
		`bloodraven_deploy_api_requests_total{group="",handler="get_group",namespace="",status="403"} 3`,
		active[0], active[1],
		`bloodraven_deploy_api_request_duration_seconds_count{handler="grant",namespace="` + f.groupNS + `",status="201"} 2`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// The latency histogram is labelled by namespace, never by group: a
	// dozen bucket series per group would grow with the fleet.
	if strings.Contains(text, `bloodraven_deploy_api_request_duration_seconds_count{group=`) {
		t.Error("the latency histogram carries a group label")
	}
	if strings.Contains(text, "made-up-group-name") || strings.Contains(text, "made-up-namespace") {
		t.Error("an unauthorized path or ?namespace= created a metric series")
	}
	f.clock.Step(31 * time.Second)
	if text := gatherText(t, f.reg); strings.Contains(text, `namespace="`+f.groupNS+`"} 1`) {
		t.Errorf("expired leases still counted as active:\n%s", text)
	}
}

// A request whose caller went away before it was answered (a client that
// stopped renewing, a timeout) is recorded as 499, not as a 5xx of ours:
// the 5xx alert must not fire because pipelines finish (seen in the e2e
// soak: 9 of 2,383 renewals, each cancelled by a run that had just ended).
func TestACallerThatWentAwayIsNoServerError(t *testing.T) {
	f := newFixture(t)
	tok := f.grant("migration", "op-a", http.StatusCreated).str("token")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	body, _ := json.Marshal(map[string]any{"token": tok})
	req := httptest.NewRequest(http.MethodPut, leasePath("migration", "op-a"), bytes.NewReader(body)).WithContext(ctx)
	req.Header.Set("Authorization", "Bearer "+f.token)
	f.srv.Handler().ServeHTTP(httptest.NewRecorder(), req)
	text := gatherText(t, f.reg)
	if !strings.Contains(text, `bloodraven_deploy_api_requests_total{group="",handler="renew",namespace="",status="499"} 1`) &&
		!strings.Contains(text, `bloodraven_deploy_api_requests_total{group="playground",handler="renew",namespace="`+f.groupNS+`",status="499"} 1`) {
		t.Fatalf("the cancelled renewal is not recorded as 499:\n%s", grepLines(text, "requests_total"))
	}
	if strings.Contains(grepLines(text, "requests_total"), `status="5`) {
		t.Fatalf("the cancelled renewal is recorded as a server error:\n%s", grepLines(text, "requests_total"))
	}
}

func grepLines(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
