package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/e2e/e2etest"
	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/internal/scene"
	"github.com/shipstream/bloodraven/internal/testenv"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
)

// Issue 35: an authorized tenant cannot starve another. The flooder has a
// valid token and its own legitimate group, and GETs that group at 400/s
// (at least 300/s is checked) over HTTP/2 from 16 connections, in 5-s
// bursts between 5-s pauses, from a process of its own under SCHED_IDLE.
// Meanwhile the victim's `bloodraven-deploy run` holds its leases and a
// meter renews a lease of the victim's every 50 ms. The victim loses
// nothing: no renewal fails (no 429 either), the run exits 0, and the p99
// of its renewals during the bursts stays within 2x of their p99 in the
// quiet spans of the same run. The flood is answered only 200 or 429 (its
// own share), never a 5xx.
func TestAnAuthorizedTenantsFloodDoesNotStarveAnother(t *testing.T) {
	p, cfg := upPlayground(t)
	ctx := context.Background()
	admin, err := client.New(p.AdminConfig, client.Options{Scheme: bloodravenscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(p.AdminConfig)
	const floodNS, floodGroup = "flooder", "flood-group"
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: floodNS}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "pipeline", Namespace: floodNS}},
		scene.Group(floodNS, floodGroup),
		scene.Database(floodNS, "flood-app", floodGroup, bloodravenv1alpha1.DeploymentClient{Namespace: floodNS, ServiceAccount: "pipeline"}),
	} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	floodToken, err := scene.Token(ctx, kube, floodNS, "pipeline", []string{devenv.DeployAudience}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	floodURL := "https://" + cfg.TLSAddr + "/deploy/v1/groups/" + floodGroup
	flooder := &tlsClient{t: t, hc: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: playgroundTLS(t, p)}}}
	flooder.api = scene.ForURL("", flooder.hc, floodToken)
	e2etest.WaitFor(t, 30*time.Second, func() bool { // the flooder's own group is its to read
		st, _, err := flooder.do(http.MethodGet, floodURL, nil)
		return err == nil && st == http.StatusOK
	})

	createMeterGroup(t, ctx, admin)
	victimAPI := deployClient(t, p)
	dir := t.TempDir()
	started, stop := filepath.Join(dir, "started"), filepath.Join(dir, "stop")
	const op = "fair-share-victim"
	begin := time.Now()
	run := e2etest.StartDeployRun(t, p, cfg, []string{"--group", devenv.GroupName, "--instance", devenv.DatabaseName,
		"--namespace", devenv.PlaygroundNamespace, "--ttl", strconv.Itoa(victimTTLSeconds), "--operation-id", op},
		"sh", "-c", `touch "$0"; while [ ! -f "$1" ]; do sleep 0.1; done`, started, stop)
	e2etest.WaitFor(t, 30*time.Second, func() bool { _, err := os.Stat(started); return err == nil })
	stalls := e2etest.StartStallWatch(100 * time.Millisecond)
	defer stalls.Stop()
	m, lat := startMeterEvery(t, victimAPI, cfg.TLSAddr, op+"-meter", fairShareMeterPeriod)

	time.Sleep(5 * time.Second) // a quiet baseline
	const floodRate, floodSending = 400, 45 * time.Second
	f := startAuthorizedFlood(t, p, floodURL, floodToken, floodRate, floodSending)
	on := <-f.alternate(5 * time.Second)
	st := <-f.done
	m.finish(t, stalls)
	if err := os.WriteFile(stop, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	run.WaitExit(t, 30*time.Second, 0, "succeeded through the flood", "succeeded")

	// Every request of the victim the operator logged (its log samples
	// lines under a flood, so this is not every one): none refused. 499 is
	// the run's held GETs, closed by the run as it exits.
	for _, r := range victimRequests(t, p.Paths.OperatorLog, begin) {
		if r.status >= 400 && r.status != 499 {
			t.Errorf("the victim got %d on %s at %s", r.status, r.handler, r.at.Format(time.RFC3339Nano))
		}
	}
	// Latency as the victim's meter saw it (its process is not the flood's).
	var quiet, flooded []float64
	for _, r := range *lat {
		if on.contains(r.at) {
			flooded = append(flooded, r.ms)
		} else if r.at.Before(on.end()) {
			quiet = append(quiet, r.ms)
		}
	}
	var sending time.Duration
	for _, w := range on {
		sending += w.to.Sub(w.from)
	}
	rate := float64(st.Sent) / sending.Seconds()
	qp, fp := p99(quiet), p99(flooded)
	t.Logf("%d renewals quiet (p50 %.1f ms, p99 %.1f ms), %d under the flood (p50 %.1f ms, p99 %.1f ms); flood: %d sent in %v (%.0f/s) over %d connections, %v answers, protocols %v",
		len(quiet), quantile(quiet, 50), qp, len(flooded), quantile(flooded, 50), fp, st.Sent, sending.Round(time.Millisecond), rate,
		st.Connections, st.ByStatus, st.Protocols)
	t.Logf("slowest renewals quiet %s; under the flood %s", slowest(quiet, 5), slowest(flooded, 5))
	t.Logf("the slowest under the flood, by time into their burst: %s", slowestInto(*lat, on, 8))
	if len(quiet) < minFairShareRenewals || len(flooded) < minFairShareRenewals {
		t.Fatalf("too few renewals for a p99: %d quiet, %d under the flood", len(quiet), len(flooded))
	}
	if fp > 2*qp {
		t.Errorf("p99 renewal latency under the flood %.1f ms, more than 2x the quiet %.1f ms", fp, qp)
	}
	if rate < 300 {
		t.Errorf("the flood sent %.0f GET/s, want at least 300", rate)
	}
	if st.Protocols["HTTP/2.0"] == 0 || len(st.Protocols) != 1 {
		t.Errorf("the flood was not all HTTP/2: %v", st.Protocols)
	}
	for status := range st.ByStatus {
		if status != "200" && status != "429" {
			t.Errorf("the flood was answered other than 200 or 429: %v", st.ByStatus)
		}
	}
	if st.ByStatus["429"] == 0 || st.ByStatus["200"] == 0 {
		t.Errorf("the flood's own share: want both 200 and 429, got %v", st.ByStatus)
	}
}

// The meter renews every fairShareMeterPeriod: about 900 renewals per side
// (quiet, flooded), so that each side's p99 is its ninth slowest, not one
// or two stalls of a shared machine. minFairShareRenewals is the fewest per
// side for a p99. (At 100 ms, about 450 per side, the ratio of the two p99s
// on this machine ranged 1.3-1.9 between runs of one commit, with
// hypervisor steal at 2-25% of the VM's CPU.) The victim's identity then
// sends about 21 requests a second, under its 50/s share.
const (
	fairShareMeterPeriod = 50 * time.Millisecond
	minFairShareRenewals = 600
)

// renewal is one of the meter's renewals: when it was sent and how long
// its answer took.
type renewal struct {
	at time.Time
	ms float64
}

// startMeterEvery is startMeter at another period; it also records each
// renewal's latency (read once the meter finished).
func startMeterEvery(t *testing.T, c *tlsClient, addr, op string, period time.Duration) (*meter, *[]renewal) {
	t.Helper()
	base := "https://" + addr + "/deploy/v1/groups/" + meterGroup
	ns := "?namespace=" + devenv.PlaygroundNamespace
	var token string
	e2etest.WaitFor(t, 30*time.Second, func() bool {
		st, body, err := c.do(http.MethodPost, base+"/leases"+ns,
			map[string]any{"kind": "migration", "operationId": op, "instance": meterDatabase, "ttlSeconds": victimTTLSeconds})
		token, _ = body["token"].(string)
		return err == nil && (st == http.StatusCreated || st == http.StatusOK) && token != ""
	})
	m := &meter{stop: make(chan struct{}), done: make(chan struct{}), lastOK: time.Now()}
	lat := &[]renewal{}
	go func() {
		defer close(m.done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-m.stop:
				_, _, _ = c.do(http.MethodDelete, base+"/leases/migration/"+op+ns, nil, "X-Lease-Token", token)
				return
			case <-tick.C:
			}
			sent := time.Now()
			st, body, err := c.do(http.MethodPut, base+"/leases/migration/"+op+ns, map[string]any{"token": token})
			m.renewals++
			if err != nil || st != http.StatusOK {
				m.failures = append(m.failures, fmt.Sprintf("%d %v %v at %s", st, body, err, time.Now().UTC().Format("15:04:05.000")))
				continue
			}
			now := time.Now()
			*lat = append(*lat, renewal{at: sent, ms: float64(now.Sub(sent).Microseconds()) / 1000})
			m.endSpan(now)
			m.lastOK = now
		}
	}()
	return m, lat
}

// authorizedFloodStats is what the flood process prints.
type authorizedFloodStats struct {
	Sent        int64          `json:"sent"`
	Connections int            `json:"connections"`
	ByStatus    map[string]int `json:"byStatus"`
	Protocols   map[string]int `json:"protocols"`
}

// floodConnections is how many HTTP/2 connections the flood spreads over.
const floodConnections = 16

// startAuthorizedFlood runs the flood (e2e/e2etest/authflood, its own
// process, built without the race detector) under SCHED_IDLE: on a real
// cluster the attacker's CPU is not the operator's, and here the flood's own
// TLS and HTTP/2 work would otherwise be charged to the victim on two shared
// cores. Renewal latency under the flood then measures what the operator
// pays to answer it. (It ran at nice 19 set with setpriority after it
// started, which on Linux renices one thread, not the Go runtime's others:
// a victim's request then waited behind the flood's threads at each of its
// hops, and the flooded p99 passed 2x the quiet one about one run in five.
// chrt sets the policy before the exec, so every thread inherits it, and a
// SCHED_IDLE thread gives its core up to any other that wakes.)
// rate GETs per second of url with token for sending of sending time. Its
// done delivers stats; it can be paused (alternate).
func startAuthorizedFlood(t *testing.T, p *devenv.Playground, url, token string, rate int, sending time.Duration) *authorizedFlood {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "authflood")
	build := exec.Command("go", "build", "-o", bin, "./e2e/e2etest/authflood")
	build.Dir = testenv.RepoRoot()
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build authflood: %v\n%s", err, b)
	}
	// chrt (util-linux, on every Debian) execs the flood in place: its pid
	// is the flood's, for alternate's SIGSTOP.
	cmd := exec.Command("chrt", "--idle", "0", bin, "-url", url, "-ca", p.Paths.CACert, "-rate", strconv.Itoa(rate),
		"-duration", sending.String(), "-connections", strconv.Itoa(floodConnections))
	cmd.Env = append(os.Environ(), "AUTHFLOOD_TOKEN="+token)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	f := &authorizedFlood{flood: flood{cmd: cmd, exited: make(chan struct{})}, done: make(chan authorizedFloodStats, 1)}
	go func() {
		var st authorizedFloodStats
		err := cmd.Wait()
		close(f.exited)
		if err != nil || json.Unmarshal(out.Bytes(), &st) != nil {
			st.ByStatus = map[string]int{"flood failed: " + errb.String() + out.String(): 1}
		}
		f.done <- st
	}()
	return f
}

type authorizedFlood struct {
	flood
	done chan authorizedFloodStats
}
