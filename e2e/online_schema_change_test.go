package e2e

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/e2e/e2etest"
	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/internal/faultproxy"
	"github.com/shipstream/bloodraven/internal/readonly"
	"github.com/shipstream/bloodraven/internal/testenv"
)

// Online schema changes (issue 40, docs/online-schema-change.md) with the
// real pt-online-schema-change (Debian's percona-toolkit) and the recipe in
// examples/online-schema-change/pt-osc, on the playground's MariaDB. Rows
// are written to the migrated table through every run, to whichever site
// is the primary; at the end every acknowledged row is there once.

const (
	oscDatabase = "shop"
	oscTable    = "orders"
	oscAlter    = "ADD COLUMN note VARCHAR(32) NULL"
	oscUser     = "osc"
	oscPassword = "osc-only"
	// writtenFrom: the writer's ids start here; the seeded rows are below.
	writtenFrom = 1_000_000
)

// oscSite is one site as the migration sees it: an account without SUPER
// or READ ONLY ADMIN (so read_only binds it, as it binds an application).
type oscSite struct {
	name, socket, defaultsFile string
	db                         *sql.DB
}

// prepareOSC creates shop.orders with rows seeded rows on iad and the
// migration's account (replicated to pdx), lets both sites' binary logs
// trust trigger creators (pt-online-schema-change creates triggers), and
// waits until pdx has it all.
func prepareOSC(t *testing.T, p *devenv.Playground, rows int) map[string]*oscSite {
	t.Helper()
	ctx := context.Background()
	sites := map[string]*oscSite{}
	for _, s := range p.Sites {
		root, err := s.Root()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { root.Close() })
		if _, err := root.ExecContext(ctx, "SET GLOBAL log_bin_trust_function_creators = 1"); err != nil {
			t.Fatal(err)
		}
		if s.Name == "iad" {
			for _, stmt := range []string{
				"CREATE DATABASE " + oscDatabase,
				"CREATE TABLE " + oscDatabase + "." + oscTable + " (id BIGINT PRIMARY KEY, v VARCHAR(64) NOT NULL)",
				fmt.Sprintf("INSERT INTO %s.%s (id, v) SELECT seq, CONCAT('seed-', seq) FROM %s.seq_1_to_%d", oscDatabase, oscTable, oscDatabase, rows),
				fmt.Sprintf("CREATE USER '%s'@'localhost' IDENTIFIED BY '%s'", oscUser, oscPassword),
				fmt.Sprintf("GRANT ALL ON %s.* TO '%s'@'localhost'", oscDatabase, oscUser),
				fmt.Sprintf("GRANT PROCESS ON *.* TO '%s'@'localhost'", oscUser),
				fmt.Sprintf("CREATE USER '%s'@'127.0.0.1' IDENTIFIED BY '%s'", oscUser, oscPassword),
				fmt.Sprintf("GRANT ALL ON %s.* TO '%s'@'127.0.0.1'", oscDatabase, oscUser),
				fmt.Sprintf("GRANT PROCESS ON *.* TO '%s'@'127.0.0.1'", oscUser),
			} {
				if _, err := root.ExecContext(ctx, stmt); err != nil {
					t.Fatalf("%s: %v", stmt, err)
				}
			}
		}
		site := &oscSite{name: s.Name, socket: s.Socket(), defaultsFile: filepath.Join(t.TempDir(), s.Name+".cnf")}
		cnf := fmt.Sprintf("[client]\nuser=%s\npassword=%s\nsocket=%s\n", oscUser, oscPassword, site.socket)
		if err := os.WriteFile(site.defaultsFile, []byte(cnf), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := mysql.NewConfig()
		cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = oscUser, oscPassword, "unix", site.socket, oscDatabase
		cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = 2*time.Second, 2*time.Second, 2*time.Second
		if site.db, err = sql.Open("mysql", cfg.FormatDSN()); err != nil {
			t.Fatal(err)
		}
		site.db.SetMaxOpenConns(2)
		t.Cleanup(func() { site.db.Close() })
		sites[s.Name] = site
	}
	waitFor(t, 30*time.Second, func() bool {
		var n int
		return sites["pdx"].db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+oscTable).Scan(&n) == nil && n == rows
	})
	return sites
}

// oscRun starts the pt-osc recipe under `bloodraven deploy run` as
// operation op, against site, with ptFlags for pt-online-schema-change.
func oscRun(t *testing.T, p *devenv.Playground, cfg devenv.Config, site *oscSite, op, ptFlags string, extra ...string) *e2etest.DeployRun {
	t.Helper()
	env := []string{"OSC_DEFAULTS_FILE=" + site.defaultsFile, "OSC_DATABASE=" + oscDatabase, "OSC_TABLE=" + oscTable,
		"OSC_ALTER=" + oscAlter, "OSC_PT_FLAGS=" + ptFlags, "MYSQL=mariadb", "BLOODRAVEN_DEPLOY=" + cfg.OperatorBinary + " deploy"}
	flags := append([]string{"--group", devenv.GroupName, "--namespace", devenv.PlaygroundNamespace, "--instance", devenv.DatabaseName,
		"--ttl", "30", "--operation-id", op}, extra...)
	return e2etest.StartDeployRunEnv(t, p, cfg, env, flags, filepath.Join(testenv.RepoRoot(), "examples", "online-schema-change", "pt-osc", "migrate.sh"))
}

// columns lists the table's columns on site.
func columns(t *testing.T, site *oscSite, table string) []string {
	t.Helper()
	rows, err := site.db.Query("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION", oscDatabase, table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// leftovers lists pt-online-schema-change's objects on site: its tables
// and its triggers.
func leftovers(t *testing.T, site *oscSite) []string {
	t.Helper()
	var out []string
	for _, q := range []string{
		"SELECT CONCAT('table ', TABLE_NAME) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME LIKE '\\_%'",
		"SELECT CONCAT('trigger ', TRIGGER_NAME) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ?",
	} {
		rows, err := site.db.Query(q, oscDatabase)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			_ = rows.Scan(&s)
			out = append(out, s)
		}
		rows.Close()
	}
	sort.Strings(out)
	return out
}

// expectCutOver checks that the table on site has the new column and that
// nothing of the tool is left beside it.
func expectCutOver(t *testing.T, site *oscSite) {
	t.Helper()
	if cols := columns(t, site, oscTable); !slices.Equal(cols, []string{"id", "v", "note"}) {
		t.Fatalf("columns on %s after the cut-over: %v, want [id v note]", site.name, cols)
	}
	if left := leftovers(t, site); len(left) != 0 {
		t.Fatalf("left on %s after the cut-over: %v", site.name, left)
	}
}

// rowWriter inserts rows with ids from writtenFrom, one at a time, into
// the table on whichever site the group says is the primary. An insert
// whose answer was lost is retried with the same id; a duplicate-key
// answer then means the first attempt landed. acked are the ids a primary
// acknowledged.
type rowWriter struct {
	sites  map[string]*oscSite
	admin  client.Client
	key    client.ObjectKey
	mu     sync.Mutex // held around each insert; pause takes it
	paused atomic.Bool
	acked  []int64
	next   int64
	stop   chan struct{}
	done   chan struct{}
}

func startRowWriter(t *testing.T, sites map[string]*oscSite, admin client.Client, key client.ObjectKey) *rowWriter {
	t.Helper()
	w := &rowWriter{sites: sites, admin: admin, key: key, next: writtenFrom, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	t.Cleanup(w.halt)
	return w
}

func (w *rowWriter) run() {
	defer close(w.done)
	primary, lastLook := "iad", time.Time{}
	for {
		select {
		case <-w.stop:
			return
		case <-time.After(40 * time.Millisecond):
		}
		if w.paused.Load() {
			continue
		}
		if time.Since(lastLook) > 300*time.Millisecond {
			g := &bloodravenv1alpha1.MysqlFailoverGroup{}
			if w.admin.Get(context.Background(), w.key, g) == nil && g.Status.ActiveSite != "" {
				primary = g.Status.ActiveSite
			}
			lastLook = time.Now()
		}
		w.mu.Lock()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := w.sites[primary].db.ExecContext(ctx, "INSERT INTO "+oscTable+" (id, v) VALUES (?, ?)", w.next, fmt.Sprintf("written-%d", w.next))
		cancel()
		var me *mysql.MySQLError
		if err == nil || errors.As(err, &me) && me.Number == 1062 {
			w.acked = append(w.acked, w.next)
			w.next++
		}
		w.mu.Unlock()
	}
}

// pause returns once no insert is in flight; resume lets them go on.
func (w *rowWriter) pause() { w.paused.Store(true); w.mu.Lock(); defer w.mu.Unlock() }

func (w *rowWriter) resume() { w.paused.Store(false) }

func (w *rowWriter) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// check stops the writer and checks site: the seeded rows and every
// acknowledged row are there, once each, and no row it never sent.
func (w *rowWriter) check(t *testing.T, site *oscSite, seeded int) {
	t.Helper()
	w.halt()
	var seeds, written, distinct int
	if err := site.db.QueryRow("SELECT COUNT(*) FROM "+oscTable+" WHERE id < ?", writtenFrom).Scan(&seeds); err != nil {
		t.Fatal(err)
	}
	rows, err := site.db.Query("SELECT id FROM "+oscTable+" WHERE id >= ? ORDER BY id", writtenFrom)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int64]int{}
	for rows.Next() {
		var id int64
		_ = rows.Scan(&id)
		got[id]++
		written++
	}
	rows.Close()
	distinct = len(got)
	var lost []int64
	for _, id := range w.acked {
		if got[id] == 0 {
			lost = append(lost, id)
		}
	}
	switch {
	case seeds != seeded:
		t.Fatalf("%d seeded rows on %s, want %d", seeds, site.name, seeded)
	case len(lost) > 0:
		t.Fatalf("%d acknowledged rows are missing on %s, the first %d", len(lost), site.name, lost[0])
	case written != distinct:
		t.Fatalf("%d written rows but %d ids on %s: a row is duplicated", written, distinct, site.name)
	case int64(written) > w.next-writtenFrom+1:
		t.Fatalf("%d written rows on %s, but only %d were ever sent", written, site.name, w.next-writtenFrom+1)
	}
	t.Logf("rows on %s: %d seeded, %d written through the runs (%d acknowledged), none lost, none duplicated", site.name, seeds, written, len(w.acked))
}

// waitOutput waits until the run's output contains s, and returns when it
// was seen.
func waitOutput(t *testing.T, r *e2etest.DeployRun, within time.Duration, s string) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(r.Output(), s) {
		select {
		case <-r.Done():
			if !strings.Contains(r.Output(), s) {
				t.Fatalf("the run exited (%d) without printing %q:\n%s", r.ExitCode(), s, r.Output())
			}
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q within %v:\n%s", s, within, r.Output())
		}
		time.Sleep(25 * time.Millisecond)
	}
	return time.Now()
}

// (a) An emergency failover during the copy: iad's host is lost while
// pt-online-schema-change copies. A lost host does not answer (its TCP
// connections hang until keepalives give up), so the tool reaches iad
// through a fault proxy that black-holes it, and iad's mariadbd is killed.
// pdx is promoted, the run loses its leases, stops the tool and exits 4
// (lost before its DDL boundary, stage pre-ddl); no gate closes, and the original table's
// columns and rows are unchanged on pdx; what the tool left there (its
// triggers and new table, replicated before the kill) stays, since the run
// may not touch the new primary. The next run, a new operation under its
// own authority, removes it first (the triggers before the table) and
// succeeds. (A tool that sees its primary's crash first, as a refused
// connection, fails on its own while the run still holds its leases: exit
// 1, failed at pre-ddl, no gate either; docs/online-schema-change.md.)
func TestAnEmergencyFailoverDuringAnOnlineSchemaChangesCopyNeedsNoVerification(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	p, cfg := upPlayground(t)
	admin, key, g := bootstrappedWithBudget(t, p, 5)
	probe := siteObserver(t)
	const seeded = 6000
	sites := prepareOSC(t, p, seeded)
	ro, from := readonly.Start(t, e2etest.SitesDSN(p)), time.Now()
	w := startRowWriter(t, sites, admin, key)
	proxy, err := faultproxy.New(fmt.Sprintf("127.0.0.1:%d", p.Sites[0].Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	viaProxy := &oscSite{name: "iad", defaultsFile: filepath.Join(t.TempDir(), "iad-proxied.cnf")}
	cnf := fmt.Sprintf("[client]\nuser=%s\npassword=%s\nhost=127.0.0.1\nport=%d\nprotocol=TCP\n", oscUser, oscPassword, proxy.Port())
	if err := os.WriteFile(viaProxy.defaultsFile, []byte(cnf), 0o600); err != nil {
		t.Fatal(err)
	}

	// About 30 s of copy: 60 chunks of 100 rows, 0.5 s apart.
	run := oscRun(t, p, cfg, viaProxy, "osc-a-1", "--chunk-size 100 --sleep 0.5")
	waitOutput(t, run, 60*time.Second, "Copying approximately")
	waitFor(t, 30*time.Second, func() bool { // well into the copy
		var n int
		return sites["iad"].db.QueryRow("SELECT COUNT(*) FROM _"+oscTable+"_new").Scan(&n) == nil && n >= 300
	})

	// The writer pauses while pdx catches up (asynchronous replication
	// loses what it had not shipped when a primary dies; not what this
	// test is about); iad's host is lost: the tool's path black-holed,
	// the server killed; the writer goes on.
	w.pause()
	proxy.SetMode(faultproxy.BlackHole)
	waitFor(t, 30*time.Second, func() bool {
		gtids, _ := probe.GTIDs(context.Background(), g)
		return gtids["iad"] != "" && gtids["iad"] == gtids["pdx"]
	})
	p.Sites[0].Kill()
	killed := time.Now()
	w.resume()
	waitFor(t, 60*time.Second, func() bool {
		g = getGroup(t, admin, key)
		return g.Status.ActiveSite == "pdx" && g.Status.TopologyGeneration == 2
	})
	promoted := time.Now()
	lost := waitOutput(t, run, 60*time.Second, "AUTHORITY LOST")
	run.WaitExit(t, 60*time.Second, 4, "lost before its DDL boundary: the copy", "lost-before-ddl")
	stopped := time.Now()
	t.Logf("the first run's output:\n%s", run.Output())
	if rec, _ := run.Recorded(); !strings.Contains(rec, `"lostStage": "pre-ddl"`) {
		t.Fatalf("the outcome does not say the run was lost during the copy:\n%s", rec)
	}
	if strings.Contains(run.Output(), "cut-over allowed") || strings.Contains(run.Output(), "Successfully altered") {
		t.Fatalf("the first run cut over:\n%s", run.Output())
	}
	pdx := sites["pdx"]
	if cols := columns(t, pdx, oscTable); !slices.Equal(cols, []string{"id", "v"}) {
		t.Fatalf("the original table's columns on pdx after the lost copy: %v, want [id v]", cols)
	}
	left := leftovers(t, pdx)
	if !slices.Contains(left, "table _"+oscTable+"_new") {
		t.Fatalf("pt-online-schema-change's new table is not on pdx (%v): the run should have stopped mid-copy", left)
	}
	t.Logf("iad killed; pdx promoted %v later; the run saw its loss %v and had stopped the tool and exited %v after the promotion; left on pdx: %v",
		promoted.Sub(killed).Round(100*time.Millisecond), lost.Sub(promoted).Round(100*time.Millisecond), stopped.Sub(promoted).Round(100*time.Millisecond), left)
	expectNotGated(t, p, admin, cfg.TLSAddr, "a run lost during its copy")

	// The old primary comes back (writable, as a restarted server does:
	// the data plane cannot start it fenced) and is fenced and repointed:
	// the group is stable again. No sample shows two writable sites before
	// the restart, nor once iad was fenced.
	restarted := ro.Mark("iad restarted")
	if err := p.Sites[0].Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 90*time.Second, func() bool {
		g = getGroup(t, admin, key)
		return g.Status.Health.ReplicationRunning && g.Status.Health.Ready
	})
	fenced, ok := ro.FirstReadOnly("iad", restarted)
	if !ok {
		t.Fatal("no sample shows the restarted iad read-only")
	}
	t.Logf("the restarted iad was fenced %v after its restart", fenced.Sub(restarted).Round(100*time.Millisecond))

	// The next run cleans up under its own authority, then cuts over once
	// it is safe.
	next := oscRun(t, p, cfg, pdx, "osc-a-2", "--chunk-size 500 --sleep 0.05")
	gone := waitOutput(t, next, 90*time.Second, "cleanup: dropping table _"+oscTable+"_new")
	next.WaitExit(t, 120*time.Second, 0, "the next run cleaned up and cut over", "succeeded")
	for _, want := range []string{"cleanup: dropping trigger pt_osc_", "cut-over allowed", "Successfully altered"} {
		if !strings.Contains(next.Output(), want) {
			t.Errorf("the next run's output lacks %q:\n%s", want, next.Output())
		}
	}
	t.Logf("the shadow table was dropped %v after the promotion (the next run's clean-up)", gone.Sub(promoted).Round(100*time.Millisecond))
	expectCutOver(t, pdx)
	w.check(t, pdx, seeded)
	ro.Stop()
	assertNoSplitBrain(t, ro, from, restarted)
	assertNoSplitBrain(t, ro, fenced, time.Now())
	expectNotGated(t, p, admin, cfg.TLSAddr, "a run that cut over and confirmed its end")
	waitRuns(t, admin, map[string]runWant{
		"osc-a-1": {outcome: "lost-before-ddl", phase: "pre-ddl", leaseEnd: "revoked", reason: "topology_changed", granted: 1, revokedAt: 2},
		"osc-a-2": {outcome: "succeeded", phase: "done", leaseEnd: "released", granted: 2},
	})
}

// (b) A planned failover requested during the copy is deferred while the
// run's hold lives; the cut-over hook waits while it is pending (the
// observation says why), and nothing is cut over. The group's deferral
// budget (60 s) then revokes the hold: the run exits 4 (stage
// awaiting-cut-over), the failover completes, and the next run cuts over
// on pdx once it is safe. The schema is changed exactly once.
func TestACutOverWaitsWhileAPlannedFailoverIsPending(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	p, cfg := upPlayground(t)
	admin, key, g := bootstrapped(t, p)
	ctx := context.Background()
	patch := client.MergeFrom(g.DeepCopy())
	g.Spec.MaxDeferralSeconds = ptr.To[int32](60) // the least the API allows
	if err := admin.Patch(ctx, g, patch); err != nil {
		t.Fatal(err)
	}
	const seeded = 2000
	sites := prepareOSC(t, p, seeded)
	ro, from := readonly.Start(t, e2etest.SitesDSN(p)), time.Now()
	w := startRowWriter(t, sites, admin, key)

	run := oscRun(t, p, cfg, sites["iad"], "osc-b-1", "--chunk-size 100 --sleep 0.2")
	waitOutput(t, run, 60*time.Second, "Copying approximately")
	requestPlannedFailover(t, admin, key, "osc-b-failover", "pdx")
	waitFor(t, 30*time.Second, func() bool {
		pf := getGroup(t, admin, key).Status.PlannedFailover
		return pf != nil && pf.Phase == bloodravenv1alpha1.PlannedFailoverPhaseDeferred
	})
	waitOutput(t, run, 60*time.Second, "cut-over not allowed yet: PlannedOperation")
	c := deployClient(t, p)
	st, body := c.call(http.MethodGet, groupAPI(cfg.TLSAddr), nil)
	co, _ := body["cutOver"].(map[string]any)
	if st != http.StatusOK || co["allowed"] != false || !strings.HasPrefix(fmt.Sprint(co["reason"]), "PlannedOperation") {
		t.Fatalf("the observation while the failover is deferred: %d cutOver %v", st, co)
	}
	t.Logf("the observation while the cut-over waits: %v", co)
	if cols := columns(t, sites["iad"], oscTable); !slices.Equal(cols, []string{"id", "v"}) {
		t.Fatalf("columns while the cut-over waits: %v", cols)
	}

	run.WaitExit(t, 90*time.Second, 4, "the hold was revoked by the deferral budget while the cut-over waited", "lost-before-ddl")
	if rec, _ := run.Recorded(); !strings.Contains(rec, `"lostStage": "awaiting-cut-over"`) {
		t.Fatalf("the outcome does not say the cut-over was waiting:\n%s", rec)
	}
	waitFor(t, 60*time.Second, func() bool {
		g = getGroup(t, admin, key)
		return g.Status.ActiveSite == "pdx" && g.Status.PlannedFailover != nil && g.Status.PlannedFailover.Phase == bloodravenv1alpha1.PlannedFailoverPhaseCompleted
	})
	pdx := sites["pdx"]
	if cols := columns(t, pdx, oscTable); !slices.Equal(cols, []string{"id", "v"}) {
		t.Fatalf("columns on pdx after the planned failover: %v, want [id v]", cols)
	}
	t.Logf("left on pdx by the first run: %v", leftovers(t, pdx))

	next := oscRun(t, p, cfg, pdx, "osc-b-2", "--chunk-size 500 --sleep 0.05")
	next.WaitExit(t, 120*time.Second, 0, "the cut-over once it was safe", "succeeded")
	if n := strings.Count(run.Output()+next.Output(), "Successfully altered"); n != 1 || !strings.Contains(next.Output(), "cut-over allowed") {
		t.Fatalf("%d successful alterations, want exactly 1 (the next run's):\n%s\n%s", n, run.Output(), next.Output())
	}
	expectCutOver(t, pdx)
	w.check(t, pdx, seeded)
	ro.Stop()
	assertNoSplitBrain(t, ro, from, time.Now())
	expectNotGated(t, p, admin, cfg.TLSAddr, "runs lost while waiting to cut over, then cut over")
	waitRuns(t, admin, map[string]runWant{
		"osc-b-1": {outcome: "lost-before-ddl", phase: "pre-ddl", granted: 1, anyEnd: true},
		"osc-b-2": {outcome: "succeeded", phase: "done", leaseEnd: "released", granted: 2},
	})
}

// gh-ost's postpone flag file, with a stand-in for gh-ost (gh-ost is not
// served here: e2e/testdata/gh-ost-standin honours the file as gh-ost
// documents it) and the recipe in examples/online-schema-change/gh-ost. A
// planned failover requested during the copy keeps the file in place
// after the copy (the cut-over is not safe); once the request is
// withdrawn the run removes it, the stand-in cuts over, and the run
// succeeds at phase done. The stand-in streams no binary log, so no rows
// are written during it.
func TestThePostponeFileHoldsAGhostCutOverUntilItIsSafe(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	p, cfg := upPlayground(t)
	admin, key, _ := bootstrapped(t, p)
	ctx := context.Background()
	sites := prepareOSC(t, p, 500)
	postpone := filepath.Join(t.TempDir(), "ghost.postpone")
	ghost := filepath.Join(testenv.RepoRoot(), "examples", "online-schema-change", "gh-ost")
	env := []string{"OSC_DEFAULTS_FILE=" + sites["iad"].defaultsFile, "OSC_DATABASE=" + oscDatabase, "OSC_TABLE=" + oscTable,
		"OSC_ALTER=" + oscAlter, "MYSQL=mariadb", "BLOODRAVEN_DEPLOY=" + cfg.OperatorBinary + " deploy",
		"GHOST=" + filepath.Join(testenv.RepoRoot(), "e2e", "testdata", "gh-ost-standin"), "GHOST_FLAGS=--chunk-size=50", "STANDIN_SLEEP=0.3"}
	run := e2etest.StartDeployRunEnv(t, p, cfg, env, []string{"--group", devenv.GroupName, "--instance", devenv.DatabaseName,
		"--ttl", "30", "--operation-id", "ghost-1", "--postpone-flag-file", postpone}, filepath.Join(ghost, "migrate.sh"))
	waitOutput(t, run, 60*time.Second, "gh-ost stand-in: copying rows")
	if _, err := os.Stat(postpone); err != nil {
		t.Fatalf("no postpone file while the copy runs: %v", err)
	}
	requestPlannedFailover(t, admin, key, "ghost-failover", "pdx")
	waitOutput(t, run, 60*time.Second, "it postpones its cut-over")
	waitOutput(t, run, 30*time.Second, "cut-over not allowed yet: PlannedOperationPending")
	for range 3 {
		time.Sleep(time.Second)
		if _, err := os.Stat(postpone); err != nil {
			t.Fatalf("the postpone file went while a planned failover was pending:\n%s", run.Output())
		}
	}
	if cols := columns(t, sites["iad"], oscTable); !slices.Equal(cols, []string{"id", "v"}) {
		t.Fatalf("columns while the cut-over is postponed: %v", cols)
	}
	// The person withdraws the planned failover: the group is stable again.
	g := getGroup(t, admin, key)
	patch := client.MergeFrom(g.DeepCopy())
	g.Spec.PlannedFailover = nil
	if err := admin.Patch(ctx, g, patch); err != nil {
		t.Fatal(err)
	}
	run.WaitExit(t, 60*time.Second, 0, "cut over once the failover was withdrawn", "succeeded")
	for _, want := range []string{"cut-over allowed: the DDL boundary is marked and confirmed, and " + postpone + " is removed", "gh-ost stand-in: cutting over"} {
		if !strings.Contains(run.Output(), want) {
			t.Errorf("the run's output lacks %q:\n%s", want, run.Output())
		}
	}
	expectCutOver(t, sites["iad"])
	waitRuns(t, admin, map[string]runWant{"ghost-1": {outcome: "succeeded", phase: "done", leaseEnd: "released", granted: 1}})
}
