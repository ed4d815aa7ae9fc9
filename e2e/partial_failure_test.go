package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/e2e/e2etest"
	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/internal/faultproxy"
	"github.com/shipstream/bloodraven/internal/mariadblocal"
	"github.com/shipstream/bloodraven/internal/readonly"
	"github.com/shipstream/bloodraven/policy"
)

// probeInterval is the playground operator's --probe-interval.
const probeInterval = 2 * time.Second

// A planned failover requested while the primary (iad) is paused,
// black-holed or refusing connections waits in Admitting/SiteUnreachable,
// naming iad, writes no transition and opens no site; once iad is back it
// completes, and no sample from the request to the completion shows two
// writable sites.
func TestPlannedFailoverWaitsForAnUnreachablePrimary(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	for _, fault := range []string{"paused", "black-holed", "refused"} {
		t.Run(fault, func(t *testing.T) {
			r := requestUnderFault(t, fault, 600) // the emergency path stays out of the way
			admin, key, ro, dump, f, faultAt, requested := r.admin, r.key, r.ro, r.dump, r.f, r.faultAt, r.requested

			// It waits, naming iad.
			waitingSince := waitStatus(t, admin, key, 40*time.Second, dump, func(g *bloodravenv1alpha1.MysqlFailoverGroup) (bool, string) {
				if msg := plannedMovedEarly(g); msg != "" {
					return false, msg
				}
				pf := g.Status.PlannedFailover
				return pf != nil && pf.Phase == bloodravenv1alpha1.PlannedFailoverPhaseAdmitting && pf.Reason == policy.WaitSiteUnreachable, ""
			})
			ro.Mark("status: Admitting/SiteUnreachable")
			holdFrom := time.Now()
			for time.Since(holdFrom) < 4*probeInterval {
				g := getGroup(t, admin, key)
				pf := g.Status.PlannedFailover
				switch {
				case pf == nil || pf.Phase != bloodravenv1alpha1.PlannedFailoverPhaseAdmitting || pf.Reason != policy.WaitSiteUnreachable:
					dump("planned failover left Admitting/SiteUnreachable while iad is %s", fault)
				case pf.Admission == nil || !strings.Contains(pf.Admission.Message, "iad"):
					dump("the admission message does not name iad")
				case g.Status.Transition != nil:
					dump("a transition was written while iad is %s", fault)
				case g.Status.TopologyGeneration != 1 || g.Status.ActiveSite != "iad":
					dump("the topology moved while iad is %s", fault)
				}
				time.Sleep(200 * time.Millisecond)
			}
			held := time.Now()
			assertNoSplitBrain(t, ro, requested, held)
			if at, ok := firstWritable(ro, "pdx", faultAt); ok && !at.After(held) {
				t.Fatalf("pdx answered read_only=0 %v after the fault, while iad was %s", at.Sub(faultAt).Round(time.Millisecond), fault)
			}
			msg := getGroup(t, admin, key).Status.PlannedFailover.Admission.Message

			// iad comes back: the planned failover completes.
			f.restore()
			restored := ro.Mark("iad restored")
			waitStatus(t, admin, key, 60*time.Second, dump, func(g *bloodravenv1alpha1.MysqlFailoverGroup) (bool, string) {
				pf := g.Status.PlannedFailover
				if pf != nil && pf.Phase == bloodravenv1alpha1.PlannedFailoverPhaseFailed {
					return false, "the planned failover failed: " + pf.Reason
				}
				return pf != nil && pf.Phase == bloodravenv1alpha1.PlannedFailoverPhaseCompleted && g.Status.ActiveSite == "pdx" && g.Status.TopologyGeneration == 2, ""
			})
			completed := ro.Mark("planned failover completed")
			time.Sleep(2 * readonly.Interval) // the sampler's answers up to the completion
			assertNoSplitBrain(t, ro, requested, time.Now())
			g := getGroup(t, admin, key)
			if r := g.Status.PlannedFailover.Reason; r != "Promoted" {
				dump("completed with reason %q, want Promoted", r)
			}
			fencedAt, fenced := ro.FirstReadOnly("iad", restored)
			openedAt, opened := firstWritable(ro, "pdx", restored)
			if !fenced || !opened || openedAt.Before(fencedAt) {
				t.Fatalf("after the restore: iad first read-only %v (%v), pdx first writable %v (%v)", fencedAt, fenced, openedAt, opened)
			}
			reasons := eventReasons(t, admin)
			t.Logf("%s: waiting (Admitting/SiteUnreachable) %v after the request, held %v; waited %v in all from request to restore; completed %v after the restore (iad read-only +%v, pdx writable +%v); fence path hit: %v",
				fault, waitingSince.Sub(requested).Round(time.Millisecond), held.Sub(waitingSince).Round(time.Millisecond),
				restored.Sub(requested).Round(time.Millisecond), completed.Sub(restored).Round(time.Millisecond),
				fencedAt.Sub(restored).Round(time.Millisecond), openedAt.Sub(restored).Round(time.Millisecond), slices.Contains(reasons, "OperationWaiting"))
			t.Logf("%s: admission message: %s", fault, msg)
			t.Logf("%s: events: %v", fault, reasons)
			t.Logf("%s: read_only timeline (W writable, R read-only, ? unknown):\n%s", fault, ro.Timeline())
		})
	}
}

// An emergency failover is not held by a planned failover that waits for an
// unreachable primary: pdx is promoted within the detection budget plus a
// few probe intervals, the returning iad is fenced within about one probe
// interval, and the planned failover then completes as AlreadyActive.
func TestEmergencyFailoverPromotesPastAPendingPlannedFailover(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	const budget = 5 * time.Second
	for _, fault := range []string{"black-holed", "paused"} {
		t.Run(fault, func(t *testing.T) {
			r := requestUnderFault(t, fault, int32(budget/time.Second))
			admin, key, ro, dump, f, faultAt, requested := r.admin, r.key, r.ro, r.dump, r.f, r.faultAt, r.requested

			// The planned failover waits and writes no transition...
			waitingAt := waitStatus(t, admin, key, 20*time.Second, dump, func(g *bloodravenv1alpha1.MysqlFailoverGroup) (bool, string) {
				if msg := plannedMovedEarly(g); msg != "" {
					return false, msg
				}
				if g.Status.TopologyGeneration != 1 {
					return false, "the emergency path promoted before the planned failover was seen waiting"
				}
				pf := g.Status.PlannedFailover
				return pf != nil && pf.Phase == bloodravenv1alpha1.PlannedFailoverPhaseAdmitting && pf.Reason == policy.WaitSiteUnreachable &&
					pf.Admission != nil && strings.Contains(pf.Admission.Message, "iad"), ""
			})
			ro.Mark("status: Admitting/SiteUnreachable")

			// ...and the emergency path promotes pdx past it.
			promotedAt := waitStatus(t, admin, key, 60*time.Second, dump, func(g *bloodravenv1alpha1.MysqlFailoverGroup) (bool, string) {
				if msg := plannedMovedEarly(g); msg != "" {
					return false, msg
				}
				return g.Status.ActiveSite == "pdx" && g.Status.TopologyGeneration == 2, ""
			})
			ro.Mark("status: pdx active at generation 2")
			took := promotedAt.Sub(faultAt)
			if limit := budget + 3*probeInterval + 9*time.Second; took > limit {
				dump("emergency promotion took %v after the fault, want < %v", took.Round(time.Millisecond), limit)
			}
			// The sampler lags by up to a tick (one query bound while iad
			// does not answer).
			waitFor(t, 5*time.Second, func() bool { _, ok := firstWritable(ro, "pdx", faultAt); return ok })
			pdxOpen, _ := firstWritable(ro, "pdx", faultAt)
			if pdxOpen.Sub(faultAt) < budget {
				dump("pdx was writable %v after the fault, before the detection budget (%v)", pdxOpen.Sub(faultAt), budget)
			}

			// iad comes back, writable to its own clients (black-hole) or as
			// it was paused; the operator fences it.
			time.Sleep(time.Second)
			f.restore()
			restored := ro.Mark("iad restored")
			waitFor(t, 30*time.Second, func() bool { _, ok := ro.FirstReadOnly("iad", restored); return ok })
			fencedAt, _ := ro.FirstReadOnly("iad", restored)
			latency, _ := ro.FenceLatency("iad", restored)
			if d := fencedAt.Sub(restored); d > probeInterval+3*time.Second {
				dump("iad first read-only %v after the restore, want < %v", d.Round(time.Millisecond), probeInterval+3*time.Second)
			}
			split := ro.TwoWritable(pdxOpen, fencedAt)

			// The planned failover ends: pdx is already active.
			waitStatus(t, admin, key, 30*time.Second, dump, func(g *bloodravenv1alpha1.MysqlFailoverGroup) (bool, string) {
				pf := g.Status.PlannedFailover
				return pf != nil && (pf.Phase == bloodravenv1alpha1.PlannedFailoverPhaseCompleted || pf.Phase == bloodravenv1alpha1.PlannedFailoverPhaseFailed), ""
			})
			g := getGroup(t, admin, key)
			pf := g.Status.PlannedFailover
			if pf.Phase != bloodravenv1alpha1.PlannedFailoverPhaseCompleted || pf.Reason != "AlreadyActive" || g.Status.TopologyGeneration != 2 {
				dump("after the emergency failover the planned failover ended %s/%s at generation %d, want Completed/AlreadyActive at 2", pf.Phase, pf.Reason, g.Status.TopologyGeneration)
			}
			reasons := eventReasons(t, admin)
			if !slices.Contains(reasons, "EmergencyFailover") {
				t.Fatalf("events %v, want EmergencyFailover", reasons)
			}
			t.Logf("%s: planned failover waiting %v after the request; pdx promoted (generation 2 seen) %v after the fault, first writable %v after it (budget %v, probe interval %v)",
				fault, waitingAt.Sub(requested).Round(time.Millisecond), took.Round(time.Millisecond), pdxOpen.Sub(faultAt).Round(time.Millisecond), budget, probeInterval)
			t.Logf("%s: iad read-only %v after the restore (fence latency from its first answer: %v); %d samples with both writable between pdx's promotion and iad's fence",
				fault, fencedAt.Sub(restored).Round(time.Millisecond), latency.Round(time.Millisecond), len(split))
			t.Logf("%s: planned failover ended %s/%s; events: %v", fault, pf.Phase, pf.Reason, reasons)
			t.Logf("%s: read_only timeline (W writable, R read-only, ? unknown):\n%s", fault, ro.Timeline())
		})
	}
}

// faultPlayground is a playground whose group reaches each site through a
// fault proxy (iad, then pdx), in Pass mode; the servers' own replication

// faultedRequest is a playground whose primary (iad) is under fault, with a
// planned failover to pdx requested right after the fault, and what the
// tests observe it with.
type faultedRequest struct {
	admin              client.Client
	key                client.ObjectKey
	ro                 *readonly.Sampler
	dump               func(string, ...any)
	f                  *fault
	faultAt, requested time.Time
}

// requestUnderFault brings up a playground with fault proxies in front of
// both sites and the given detection budget, waits until pdx has everything
// iad wrote, starts the read_only sampler, applies the fault to iad and
// requests the planned failover to pdx.
func requestUnderFault(t *testing.T, kind string, budgetSeconds int32) *faultedRequest {
	t.Helper()
	ctx := context.Background()
	p, proxies := faultPlayground(t)
	admin, key, g := bootstrappedWithBudget(t, p, budgetSeconds)
	probe := siteObserver(t)
	waitFor(t, 30*time.Second, func() bool {
		gtids, _ := probe.GTIDs(ctx, g)
		return gtids["iad"] != "" && gtids["iad"] == gtids["pdx"]
	})
	r := &faultedRequest{admin: admin, key: key, ro: readonly.Start(t, e2etest.SitesDSN(p)),
		dump: statusDumper(t, admin, key, p)}
	r.f = applyFault(t, kind, p, proxies)
	r.faultAt = r.ro.Mark("fault on iad: " + kind)
	requestPlannedFailover(t, admin, key, "pf-"+kind, "pdx")
	r.requested = r.ro.Mark("planned failover to pdx requested")
	t.Logf("%s: fault at %s, request at %s", kind, r.faultAt.Format("15:04:05.000"), r.requested.Format("15:04:05.000"))
	return r
}

// set up by devenv.Up stays direct.
func faultPlayground(t *testing.T) (*devenv.Playground, [2]*faultproxy.Proxy) {
	t.Helper()
	var proxies [2]*faultproxy.Proxy
	p, _ := e2etest.PlaygroundWith(t, func(cfg *devenv.Config) { proxies = faultProxies(t, cfg) })
	return p, proxies
}

// fault is one fault applied to iad; restore is idempotent and also runs
// when the test ends (before the playground is stopped: a stopped mariadbd
// would not take the SIGTERM of Down).
type fault struct {
	restore func()
}

func applyFault(t *testing.T, kind string, p *devenv.Playground, proxies [2]*faultproxy.Proxy) *fault {
	t.Helper()
	var once sync.Once
	var undo func()
	switch kind {
	case "paused":
		pid := mariadbdPID(t, p.Sites[0])
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP iad's mariadbd (%d): %v", pid, err)
		}
		undo = func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT iad's mariadbd (%d): %v", pid, err)
			}
		}
	case "black-holed":
		proxies[0].SetMode(faultproxy.BlackHole)
		undo = func() { proxies[0].SetMode(faultproxy.Pass) }
	case "refused":
		proxies[0].SetMode(faultproxy.Refuse)
		undo = func() { proxies[0].SetMode(faultproxy.Pass) }
	default:
		t.Fatalf("unknown fault %q", kind)
	}
	f := &fault{restore: func() { once.Do(undo) }}
	t.Cleanup(f.restore)
	return f
}

// mariadbdPID reads the server's pid file and checks the process is its
// mariadbd.
func mariadbdPID(t *testing.T, s *mariadblocal.Server) int {
	t.Helper()
	dir := s.Dir
	b, err := os.ReadFile(filepath.Join(dir, "mariadbd.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !bytes.Contains(cmdline, []byte("mariadbd")) || !bytes.Contains(cmdline, []byte(dir)) {
		t.Fatalf("pid %d is not the site's mariadbd: %q (%v)", pid, cmdline, err)
	}
	return pid
}

// requestPlannedFailover sets spec.plannedFailover with a merge patch.
func requestPlannedFailover(t *testing.T, admin client.Client, key client.ObjectKey, id, target string) {
	t.Helper()
	g := getGroup(t, admin, key)
	patch := client.MergeFrom(g.DeepCopy())
	g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: id, TargetSite: target}
	if err := admin.Patch(context.Background(), g, patch); err != nil {
		t.Fatal(err)
	}
}

func getGroup(t *testing.T, admin client.Client, key client.ObjectKey) *bloodravenv1alpha1.MysqlFailoverGroup {
	t.Helper()
	g := &bloodravenv1alpha1.MysqlFailoverGroup{}
	if err := admin.Get(context.Background(), key, g); err != nil {
		t.Fatal(err)
	}
	return g
}

// plannedMovedEarly says what is wrong when the planned failover went past
// its admission while iad is unreachable.
func plannedMovedEarly(g *bloodravenv1alpha1.MysqlFailoverGroup) string {
	if tr := g.Status.Transition; tr != nil && tr.Operation == "PlannedFailover" {
		return fmt.Sprintf("a planned transition was written while iad is unreachable: %+v", *tr)
	}
	if pf := g.Status.PlannedFailover; pf != nil && pf.Phase == bloodravenv1alpha1.PlannedFailoverPhasePromoting {
		return "the planned failover is Promoting while iad is unreachable"
	}
	if pf := g.Status.PlannedFailover; pf != nil && pf.Phase == bloodravenv1alpha1.PlannedFailoverPhaseCompleted && pf.Reason == "Promoted" {
		return "the planned failover promoted while iad is unreachable"
	}
	return ""
}

// waitStatus polls the group every 100 ms until cond holds and returns when
// it first did; a non-empty complaint from cond fails the test at once.
func waitStatus(t *testing.T, admin client.Client, key client.ObjectKey, timeout time.Duration, dump func(string, ...any), cond func(*bloodravenv1alpha1.MysqlFailoverGroup) (bool, string)) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		g := &bloodravenv1alpha1.MysqlFailoverGroup{}
		if err := admin.Get(context.Background(), key, g); err == nil {
			ok, complaint := cond(g)
			if complaint != "" {
				dump("%s", complaint)
			}
			if ok {
				return time.Now()
			}
		}
		if time.Now().After(deadline) {
			dump("status condition not met within %v", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// statusDumper records the group's status history (every change seen by a
// 100 ms poll) and returns a function that fails the test after logging it,
// the group's status, the Events and the operator's log lines about planned
// operations, fencing and failover. The history is also logged when the
// test fails otherwise.
func statusDumper(t *testing.T, admin client.Client, key client.ObjectKey, p *devenv.Playground) func(string, ...any) {
	h := &statusHistory{}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			g := &bloodravenv1alpha1.MysqlFailoverGroup{}
			if err := admin.Get(context.Background(), key, g); err == nil {
				h.add(g)
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	dumped := false
	dumpEvidence := func() {
		if dumped {
			return
		}
		dumped = true
		t.Logf("status history:\n%s", h.String())
		var events corev1.EventList
		if err := admin.List(context.Background(), &events, client.InNamespace(devenv.PlaygroundNamespace)); err == nil {
			var lines []string
			for _, e := range events.Items {
				at := e.FirstTimestamp.Time
				if at.IsZero() {
					at = e.EventTime.Time
				}
				lines = append(lines, fmt.Sprintf("%s %s %s (x%d): %s", at.Format("15:04:05.000"), e.Type, e.Reason, e.Count, e.Message))
			}
			slices.Sort(lines)
			t.Logf("events:\n%s", strings.Join(lines, "\n"))
		}
	}
	t.Cleanup(func() {
		close(stop)
		<-done
		if t.Failed() {
			dumpEvidence()
		}
	})
	return func(format string, args ...any) {
		t.Helper()
		dumpEvidence()
		g := &bloodravenv1alpha1.MysqlFailoverGroup{}
		if err := admin.Get(context.Background(), key, g); err == nil {
			b, _ := json.MarshalIndent(g.Status, "", "  ")
			t.Logf("status: %s", b)
		}
		if b, err := os.ReadFile(p.Paths.OperatorLog); err == nil {
			var lines []string
			for _, l := range strings.Split(string(b), "\n") {
				ll := strings.ToLower(l)
				if strings.Contains(ll, "plann") || strings.Contains(ll, "fence") || strings.Contains(ll, "failover") ||
					strings.Contains(ll, "promot") || strings.Contains(ll, "unreachable") || strings.Contains(ll, "error") {
					lines = append(lines, l)
				}
			}
			if len(lines) > 60 {
				lines = lines[len(lines)-60:]
			}
			t.Logf("operator log (planned/fence/failover lines):\n%s", strings.Join(lines, "\n"))
		}
		t.Fatalf(format, args...)
	}
}

func assertNoSplitBrain(t *testing.T, ro *readonly.Sampler, from, to time.Time) {
	t.Helper()
	if both := ro.TwoWritable(from, to); len(both) > 0 {
		t.Fatalf("%d samples with two writable sites between %v and %v, the first at %v",
			len(both), from.Format(time.StampMilli), to.Format(time.StampMilli), both[0].At.Format(time.StampMilli))
	}
}

// firstWritable is the time of the first sample at or after after in which
// site answered read_only=0.
func firstWritable(ro *readonly.Sampler, site string, after time.Time) (time.Time, bool) {
	for _, s := range ro.Samples() {
		if w := s.Writable[site]; w != nil && *w && !s.At.Before(after) {
			return s.At, true
		}
	}
	return time.Time{}, false
}

// statusHistory keeps every distinct summary of the group's status, with
// the time it was first seen.
type statusHistory struct {
	mu    sync.Mutex
	last  string
	lines []string
}

func (h *statusHistory) add(g *bloodravenv1alpha1.MysqlFailoverGroup) {
	st := g.Status
	sum := fmt.Sprintf("active=%s gen=%d", st.ActiveSite, st.TopologyGeneration)
	if st.PrimaryLostAt != nil {
		sum += " primaryLostAt=" + st.PrimaryLostAt.Format(time.TimeOnly)
	}
	if tr := st.Transition; tr != nil {
		sum += fmt.Sprintf(" transition=%s->%s(failures=%d %s)", tr.Operation, tr.TargetSite, tr.Failures, tr.LastError)
	}
	if r := st.Reservation; r != nil {
		sum += " reservation=" + string(r.Operation) + "/" + r.ID
	}
	if pf := st.PlannedFailover; pf != nil {
		sum += fmt.Sprintf(" planned=%s/%s", pf.Phase, pf.Reason)
		if pf.Admission != nil {
			sum += fmt.Sprintf(" (%s)", pf.Admission.Message)
		}
	}
	sum += fmt.Sprintf(" ready=%v degraded=%q", st.Health.Ready, st.Health.DegradedReason)
	h.mu.Lock()
	defer h.mu.Unlock()
	if sum != h.last {
		h.last = sum
		h.lines = append(h.lines, time.Now().Format("15:04:05.000")+" "+sum)
	}
}

func (h *statusHistory) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.lines, "\n")
}

// faultProxies puts a fault proxy in front of each of cfg's MariaDB sites:
// the operator reaches the sites through them, the tests' own connections
// stay direct. Each is closed after the playground is down.
func faultProxies(t *testing.T, cfg *devenv.Config) [2]*faultproxy.Proxy {
	t.Helper()
	var proxies [2]*faultproxy.Proxy
	for i, port := range cfg.MySQLPorts {
		px, err := faultproxy.New(fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = px.Close() })
		proxies[i] = px
		cfg.SitePorts[i] = px.Port()
	}
	return proxies
}
