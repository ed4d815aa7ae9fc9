package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/e2e/e2etest"
	"github.com/shipstream/bloodraven/internal/childproc"
	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/internal/faultproxy"
	"github.com/shipstream/bloodraven/internal/readonly"
)

// deposedSampleInterval is how often both tests' @@read_only and pdx's
// replication source are sampled: a deposed leader's stray statements take
// milliseconds.
const deposedSampleInterval = 10 * time.Millisecond

// A deposed leader never opens a site (docs/fence.md, "Invariants":
// a deposed leader never acts on the data plane), end to end with two
// operator processes. A planned failover iad→pdx is slowed (iad's fault
// proxy delays promotionDelay) and the leading operator is paused (SIGSTOP)
// inside the promotion, once its transition is persisted, while it waits
// for iad's first answer: after its first leadership check, before it
// fences iad and before it could open pdx. The follower takes over once the
// leader-election Lease lapses, completes the move (pdx, generation 2),
// then a second planned failover back to iad (generation 3). The old
// leader is then resumed (SIGCONT) and watched for 15 s: @@read_only of
// both sites, sampled every 10 ms from before the first request to the
// end, never shows two writable sites; after the final move pdx is never
// writable and its replication source stays iad (SHOW SLAVE STATUS, same
// rate); iad is never read-only after the resume (a fence confirms the
// leadership too) and writable at the end; and the old
// leader gives up: its process ends (leader election lost) and the replica
// restarted in its place answers 503 not_leader, while the follower still
// leads. The API server calls the webhooks through a forwarder switched to
// the follower once it runs: every replica serves them, and a paused one
// answers nothing. Without the leadership check and the conditional fence
// row the resumed leader fences iad, opens pdx and resets its replication.
func TestADeposedLeaderPausedMidPromotionNeverOpensASite(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	var proxies [2]*faultproxy.Proxy
	var webhooks *forwarder
	p, cfg := e2etest.PlaygroundWith(t, func(cfg *devenv.Config) {
		proxies = faultProxies(t, cfg)
		webhooks = newForwarder(t, cfg.TLSAddr)
		cfg.WebhookAddr = webhooks.addr()
	})
	c := deployClient(t, p)
	// The emergency path stays out of the way: no site is lost here.
	admin, key, g := bootstrappedWithBudget(t, p, 600)
	_, l2 := startFollower(t, p, cfg, c)
	webhooks.retarget(l2.TLS)
	leaderAPI, followerAPI := groupAPI(cfg.TLSAddr), groupAPI(l2.TLS)
	probe := siteObserver(t)
	waitFor(t, 30*time.Second, func() bool {
		gtids, _ := probe.GTIDs(context.Background(), g)
		return gtids["iad"] != "" && gtids["iad"] == gtids["pdx"]
	})
	sites := e2etest.SitesDSN(p)
	ro := readonly.StartEvery(t, sites, deposedSampleInterval)
	source := startSourceSampler(t, sites["pdx"], deposedSampleInterval)
	begin := ro.Mark("sampling")
	dump := statusDumper(t, admin, key, p)
	follower := filepath.Join(cfg.StateDir, "operator-2.log")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("follower's log (planned/fence/failover/leader lines):\n%s", interestingLines(follower, 60))
		}
	})

	// Move 1, iad→pdx, slowed, and its leader paused inside the promotion.
	_, _, requested, seen := slowPlannedMoveToPdx(t, p, admin, key, proxies[0], ro, dump, "move-1")
	// The leader writes the transition, confirms it leads, dials pdx (no
	// delay) and then dials iad (every round trip 300 ms or more): half a
	// round trip later it waits for iad's answer, before FenceOthers and
	// before it could open pdx. Paused there, it resumes into the fence
	// and the promotion's last steps with a view of the group 20 s old.
	time.Sleep(promotionDelay)
	leader := p.Operator()
	pid := leader.Pid()
	if err := childproc.Stop(pid, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var resume sync.Once
	cont := func() {
		resume.Do(func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT the old leader (%d): %v", pid, err)
			}
		})
	}
	t.Cleanup(cont) // before the playground is stopped
	paused := ro.Mark("leader paused (SIGSTOP)")
	proxies[0].SetMode(faultproxy.Pass)
	t.Logf("move 1's transition seen %v after the request; the leader (pid %d) paused %v after that",
		seen.Sub(requested).Round(time.Millisecond), pid, paused.Sub(seen).Round(time.Millisecond))

	// The follower leads once the paused leader's Lease (15 s) lapses; it
	// retries every 2 s: 60 s is four times that.
	waitFor(t, 60*time.Second, func() bool { st, _ := c.tryCall(http.MethodGet, followerAPI, nil); return st == http.StatusOK })
	tookOver := ro.Mark("the follower leads")
	// It resumes the persisted transition: a planned promotion of a few
	// round trips, then one probe interval or two.
	waitStatus(t, admin, key, 30*time.Second, dump, func(g *bloodravenv1alpha1.MysqlFailoverGroup) (bool, string) {
		pf := g.Status.PlannedFailover
		return g.Status.ActiveSite == "pdx" && g.Status.TopologyGeneration == 2 && g.Status.Transition == nil &&
			pf != nil && pf.ID == "move-1" && pf.Phase == bloodravenv1alpha1.PlannedFailoverPhaseCompleted, ""
	})
	moved1 := ro.Mark("move 1 completed by the follower (pdx, generation 2)")

	// Move 2, pdx→iad, by the follower, the old leader still paused: a
	// planned failover's admission, fence and promotion, well within 60 s.
	requestPlannedFailover(t, admin, key, "move-2", "iad")
	waitStatus(t, admin, key, 60*time.Second, dump, func(g *bloodravenv1alpha1.MysqlFailoverGroup) (bool, string) {
		pf := g.Status.PlannedFailover
		return g.Status.ActiveSite == "iad" && g.Status.TopologyGeneration == 3 && g.Status.Transition == nil &&
			pf != nil && pf.ID == "move-2" && pf.Phase == bloodravenv1alpha1.PlannedFailoverPhaseCompleted, ""
	})
	moved2 := ro.Mark("move 2 completed by the follower (iad, generation 3)")
	// pdx replicates from iad: the source every later sample must show.
	iadPorts := map[string]bool{strconv.Itoa(proxies[0].Port()): true, strconv.Itoa(cfg.MySQLPorts[0]): true}
	waitFor(t, 10*time.Second, func() bool { s, ok := source.latest(); return ok && s.at.After(moved2) && iadPorts[s.port] })
	want, _ := source.latest()

	// The old leader resumes, deposed, mid-promotion of move 1. Its
	// elector finds the Lease held by the follower and gives up within its
	// renew deadline (10 s): the process ends and the playground restarts
	// it as a Deployment would. Watched for 15 s from the SIGCONT.
	restarts := p.Restarts()
	cont()
	resumed := ro.Mark("old leader resumed (SIGCONT)")
	select {
	case <-leader.Exited():
		ro.Mark("old leader's process ended")
	case <-time.After(30 * time.Second):
		dump("the old leader still runs 30 s after it was resumed, deposed")
	}
	exited := time.Now()
	if _, err := p.WaitRestart(context.Background(), restarts, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Until(resumed.Add(15 * time.Second)); d > 0 {
		time.Sleep(d)
	}
	end := ro.Mark("end")
	time.Sleep(3 * deposedSampleInterval) // the samplers' answers up to the end
	ro.Stop()
	source.stop()

	// Never two writable sites, from the first request to the end.
	assertNoSplitBrain(t, ro, begin, end)
	// After the final move: pdx never writable, replicating from iad.
	if at, ok := firstWritable(ro, "pdx", moved2); ok {
		dump("pdx answered read_only=0 %v after the old leader was resumed (the final move made iad primary)", at.Sub(resumed).Round(time.Millisecond))
	}
	samples, unknown := 0, 0
	for _, s := range source.samples() {
		if s.at.Before(moved2) || s.at.After(end) {
			continue
		}
		if !s.known {
			unknown++
			continue
		}
		samples++
		if s.host != want.host || s.port != want.port {
			dump("%v after the old leader was resumed pdx's replication source is %q:%q (io %s, sql %s), want iad's %s:%s",
				s.at.Sub(resumed).Round(time.Millisecond), s.host, s.port, s.io, s.sql, want.host, want.port)
		}
	}
	if samples == 0 {
		dump("no answer from pdx's SHOW SLAVE STATUS after the final move")
	}
	final := getGroup(t, admin, key)
	if final.Status.ActiveSite != "iad" || final.Status.TopologyGeneration != 3 || final.Status.Transition != nil {
		dump("at the end: %s active at generation %d (transition %+v), want iad at 3", final.Status.ActiveSite, final.Status.TopologyGeneration, final.Status.Transition)
	}
	if last := ro.Samples(); len(last) == 0 || last[len(last)-1].Writable["iad"] == nil || !*last[len(last)-1].Writable["iad"] {
		dump("iad does not answer read_only=0 at the end")
	}
	// The old leader gave up; the follower still leads.
	if st, body := c.call(http.MethodGet, leaderAPI, nil); st != http.StatusServiceUnavailable || body["error"] != "not_leader" {
		dump("the old leader's replica, restarted, answers %d %v, want 503 not_leader", st, body)
	}
	if st, body := c.call(http.MethodGet, followerAPI, nil); st != http.StatusOK {
		dump("the follower answers %d %v, want 200", st, body)
	}

	// Nor did it fence its successor's primary: the fence confirms the
	// leadership too.
	gap := "iad stayed writable"
	if at, ok := ro.FirstReadOnly("iad", resumed); ok && at.Before(end) {
		back, _ := firstWritable(ro, "iad", at)
		gap = fmt.Sprintf("iad read-only from %v to %v after the SIGCONT", at.Sub(resumed).Round(time.Millisecond), back.Sub(resumed).Round(time.Millisecond))
		dump("the deposed leader fenced its successor's primary: %s", gap)
	}
	t.Logf("the follower led %v after the pause, completed move 1 %v after the pause and move 2 %v after that",
		tookOver.Sub(paused).Round(time.Millisecond), moved1.Sub(paused).Round(time.Millisecond), moved2.Sub(moved1).Round(time.Millisecond))
	t.Logf("the old leader was paused %v; its process ended %v after the SIGCONT; %s",
		resumed.Sub(paused).Round(time.Millisecond), exited.Sub(resumed).Round(time.Millisecond), gap)
	t.Logf("%d samples of @@read_only, %d of pdx's source after the final move (%d unanswered); pdx replicates from %s:%s",
		len(ro.Samples()), samples, unknown, want.host, want.port)
	t.Logf("the old leader's log after its resume:\n%s", linesAfter(p.Paths.OperatorLog, resumed, 40))
	t.Logf("read_only timeline (W writable, R read-only, ? unknown):\n%s", ro.Timeline())
}

// sourceSample is one answer of SHOW SLAVE STATUS on a site: its source
// and replication threads; known is false when the site did not answer, an
// empty host when it replicates from nothing.
type sourceSample struct {
	at              time.Time
	known           bool
	host, port      string
	io, sql         string
	lastIOErrorText string
}

// sourceSampler samples SHOW SLAVE STATUS on one site every interval,
// straight on the server (root over its unix socket). An observer only.
type sourceSampler struct {
	db   *sql.DB
	quit chan struct{}
	done chan struct{}
	once sync.Once

	mu  sync.Mutex
	all []sourceSample
}

func startSourceSampler(t *testing.T, dsn string, interval time.Duration) *sourceSampler {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	s := &sourceSampler{db: db, quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tk := time.NewTicker(interval)
		defer tk.Stop()
		for {
			s.tick()
			select {
			case <-s.quit:
				return
			case <-tk.C:
			}
		}
	}()
	t.Cleanup(s.stop)
	return s
}

func (s *sourceSampler) stop() {
	s.once.Do(func() { close(s.quit); <-s.done; _ = s.db.Close() })
}

func (s *sourceSampler) tick() {
	ctx, cancel := context.WithTimeout(context.Background(), readonly.QueryBound)
	defer cancel()
	out := sourceSample{}
	rows, err := s.db.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err == nil {
		out.known = true
		cols, _ := rows.Columns()
		if rows.Next() {
			vals := make([]sql.NullString, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				out.known = false
			}
			for i, c := range cols {
				switch c {
				case "Master_Host":
					out.host = vals[i].String
				case "Master_Port":
					out.port = vals[i].String
				case "Slave_IO_Running":
					out.io = vals[i].String
				case "Slave_SQL_Running":
					out.sql = vals[i].String
				case "Last_IO_Error":
					out.lastIOErrorText = vals[i].String
				}
			}
		}
		if rows.Err() != nil {
			out.known = false
		}
		rows.Close()
	}
	out.at = time.Now()
	s.mu.Lock()
	s.all = append(s.all, out)
	s.mu.Unlock()
}

func (s *sourceSampler) samples() []sourceSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sourceSample(nil), s.all...)
}

// latest is the newest answered sample.
func (s *sourceSampler) latest() (sourceSample, bool) {
	all := s.samples()
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].known {
			return all[i], true
		}
	}
	return sourceSample{}, false
}

// forwarder is a TCP forwarder on loopback whose target can be switched.
type forwarder struct {
	ln net.Listener

	mu     sync.Mutex
	target string
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

// newForwarder starts one in front of target; it is closed when the test
// ends (after the playground, when started before it).
func newForwarder(t *testing.T, target string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln, target: target, conns: map[net.Conn]bool{}}
	f.wg.Add(1)
	go f.serve()
	t.Cleanup(f.close)
	return f
}

func (f *forwarder) addr() string { return f.ln.Addr().String() }

// retarget sends new connections to target and closes the open ones: the
// API server keeps its connections to a webhook, and would go on calling
// the old target over them.
func (f *forwarder) retarget(target string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.target = target
	for c := range f.conns {
		_ = c.Close()
		delete(f.conns, c)
	}
}

func (f *forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conns == nil {
		_ = c.Close()
		return false
	}
	f.conns[c] = true
	return true
}

func (f *forwarder) serve() {
	defer f.wg.Done()
	for {
		in, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		target := f.target
		f.mu.Unlock()
		if !f.track(in) {
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			out, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				_ = in.Close()
				return
			}
			if !f.track(out) {
				_ = in.Close()
				return
			}
			var both sync.WaitGroup
			both.Add(2)
			pipe := func(dst, src net.Conn) {
				defer both.Done()
				_, _ = io.Copy(dst, src)
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			}
			go pipe(out, in)
			go pipe(in, out)
			both.Wait()
			_ = in.Close()
			_ = out.Close()
		}()
	}
}

func (f *forwarder) close() {
	_ = f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		_ = c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
	f.wg.Wait()
}

// interestingLines are the last n lines of the log at path about planned
// operations, fencing, failover, promotion and leadership.
func interestingLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		ll := strings.ToLower(l)
		for _, w := range []string{"plann", "fence", "failover", "promot", "lead", "error"} {
			if strings.Contains(ll, w) {
				lines = append(lines, l)
				break
			}
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// linesAfter is up to n of interestingLines of the log at path written at
// or after from (by the "ts" of each JSON line, RFC 3339 or seconds).
func linesAfter(path string, from time.Time, n int) string {
	var out []string
	for _, l := range strings.Split(interestingLines(path, 1<<20), "\n") {
		i := strings.Index(l, `"ts":`)
		if i < 0 {
			continue
		}
		rest := strings.TrimLeft(l[i+len(`"ts":`):], " ")
		var at time.Time
		if strings.HasPrefix(rest, `"`) {
			end := strings.Index(rest[1:], `"`)
			if end < 0 {
				continue
			}
			at, _ = time.Parse(time.RFC3339Nano, rest[1:1+end])
		} else {
			end := strings.IndexAny(rest, ",}")
			if end < 0 {
				continue
			}
			secs, err := strconv.ParseFloat(rest[:end], 64)
			if err != nil {
				continue
			}
			at = time.Unix(0, int64(secs*float64(time.Second)))
		}
		if !at.Before(from) {
			out = append(out, l)
		}
	}
	if len(out) > n {
		out = out[:n]
	}
	return strings.Join(out, "\n")
}
