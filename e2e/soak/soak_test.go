package soak

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/e2e/e2etest"
	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/internal/scene"
	"github.com/shipstream/bloodraven/internal/testenv"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
)

// soakClients pipelines renew a lease of soakTTL seconds each: 20, a
// renewal every 5 s per lease.
const (
	soakClients = 20
	soakTTL     = 15 // seconds
)

// soakDuration is how long every pipeline renews: BLOODRAVEN_SOAK_DURATION
// (a Go duration; `make soak` sets 5m), 80 s by default (`make test`).
func soakDuration(t *testing.T) time.Duration {
	v := os.Getenv("BLOODRAVEN_SOAK_DURATION")
	if v == "" {
		return 80 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 30*time.Second {
		t.Fatalf("BLOODRAVEN_SOAK_DURATION=%q: want a Go duration of at least 30s", v)
	}
	return d
}

// requestCounts sums bloodraven_deploy_api_requests_total by handler and
// status code.
func requestCounts(t *testing.T, url string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, sample := range e2etest.Samples(t, url) {
		line, ok := strings.CutPrefix(sample, "bloodraven_deploy_api_requests_total{")
		if !ok {
			continue
		}
		labels, value, _ := strings.Cut(line, "} ")
		var handler, code string
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "handler":
				handler = strings.Trim(v, `"`)
			case "status":
				code = strings.Trim(v, `"`)
			}
		}
		f, _ := strconv.ParseFloat(value, 64)
		out[handler+" "+code] += f
	}
	return out
}

// Twenty `bloodraven deploy run` clients, each holding the mutex and the
// failover-hold of its own group, renew for soakDuration (80 s in make
// test, five minutes in make soak): every run succeeds (no false expiry: a
// lost lease would end it with exit 4), the API answers no 5xx and no
// renewal 404, and the operator's heap, sampled ten times, is as large at
// the end as at the start.
//
// The twenty groups point at closed ports: they never bootstrap, stay at
// generation 0, and nothing moves under the leases; the soak measures the
// lease path alone.
func TestSoakOfTwentyDeployRuns(t *testing.T) {
	soakDuration := soakDuration(t)
	if testing.Short() {
		t.Skipf("%v", soakDuration)
	}
	ctx := context.Background()
	p, cfg := e2etest.Playground(t)
	admin, err := client.New(p.AdminConfig, client.Options{Scheme: bloodravenscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	closed := testenv.FreePort(t) // nothing listens there
	for i := range soakClients {
		name := fmt.Sprintf("soak-%02d", i)
		g := scene.Group(devenv.PlaygroundNamespace, name,
			bloodravenv1alpha1.Site{Name: "iad", Host: "127.0.0.1", Port: int32(closed)}, bloodravenv1alpha1.Site{Name: "pdx", Host: "127.0.0.1", Port: int32(closed)})
		g.Spec.CredentialsSecretRef = &bloodravenv1alpha1.SecretReference{Name: devenv.MySQLSecret}
		db := scene.Database(devenv.PlaygroundNamespace, name+"-app", name,
			bloodravenv1alpha1.DeploymentClient{Namespace: devenv.PlaygroundNamespace, ServiceAccount: devenv.DeployServiceAccount})
		for _, o := range []client.Object{g, db} {
			if err := admin.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	metrics := "http://" + cfg.MetricsAddr + "/metrics"
	before := requestCounts(t, metrics)

	runs := make([]*e2etest.DeployRun, soakClients)
	start := time.Now()
	for i := range runs {
		name := fmt.Sprintf("soak-%02d", i)
		runs[i] = e2etest.StartDeployRun(t, p, cfg, []string{"--group", name, "--instance", name + "-app", "--ttl", strconv.Itoa(soakTTL)},
			"sleep", strconv.Itoa(int(soakDuration.Seconds())))
	}

	// Sample the operator's heap ten times while they run.
	var heap []float64
	done := make(chan struct{})
	go func() {
		for _, r := range runs {
			<-r.Done()
		}
		close(done)
	}()
	tick := time.NewTicker(soakDuration / 10)
	defer tick.Stop()
	deadline := time.After(soakDuration + 2*time.Minute)
wait:
	for {
		select {
		case <-done:
			break wait
		case <-tick.C:
			heap = append(heap, e2etest.MetricValue(t, metrics, "go_memstats_heap_alloc_bytes"))
		case <-deadline:
			for i, r := range runs {
				t.Logf("run %d output so far:\n%s", i, r.Output())
			}
			t.Fatal("the deploy runs did not finish")
		}
	}
	took := time.Since(start)
	for i, r := range runs {
		if r.Err() != nil {
			t.Errorf("run %d exited %d (%v); output:\n%s", i, r.ExitCode(), r.Err(), r.Output())
			continue
		}
		if rec, err := r.Recorded(); err != nil || !strings.Contains(rec, `"succeeded"`) {
			t.Errorf("run %d outcome: %v %s", i, err, rec)
		}
	}
	after := requestCounts(t, metrics)
	delta := map[string]float64{}
	var fivexx, renewals float64
	for k, v := range after {
		d := v - before[k]
		if d == 0 {
			continue
		}
		delta[k] = d
		_, code, _ := strings.Cut(k, " ")
		if strings.HasPrefix(code, "5") {
			fivexx += d
		}
		if strings.HasPrefix(k, "renew 200") {
			renewals += d
		}
		if strings.HasPrefix(k, "renew 404") || strings.HasPrefix(k, "renew 409") {
			t.Errorf("renewals refused during the soak: %s ×%v", k, d)
		}
	}
	if fivexx > 0 {
		t.Errorf("%v answers 5xx during the soak: %v", fivexx, delta)
	}
	// Every lease renews every ttl/3, each renewal timed from when the last
	// was sent, so lateness adds up; ask for 80% of the nominal count. (A
	// lease that stopped renewing would have ended its run with exit 4.)
	if want := 0.8 * float64(soakClients*2) * soakDuration.Seconds() / (soakTTL / 3); renewals < want {
		t.Errorf("%v renewals answered 200, want at least %v: %v", renewals, want, delta)
	}
	if len(heap) >= 4 {
		first := max(heap[0], heap[1])
		last := max(heap[len(heap)-1], heap[len(heap)-2])
		if last > 1.5*first+8<<20 {
			t.Errorf("operator heap grew from %.1f MiB to %.1f MiB during the soak: %v", first/(1<<20), last/(1<<20), heap)
		}
	} else {
		t.Errorf("only %d heap samples", len(heap))
	}
	mib := make([]string, len(heap))
	for i, h := range heap {
		mib[i] = fmt.Sprintf("%.1f", h/(1<<20))
	}
	t.Logf("%d deploy runs for %v: %v renewals answered 200, %v answers 5xx; requests by handler and code: %v; operator heap every %v (MiB): %s",
		soakClients, took.Round(time.Second), renewals, fivexx, delta, soakDuration/10, strings.Join(mib, " "))
}
