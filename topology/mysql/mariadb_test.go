package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/mariadblocal"
	"github.com/shipstream/bloodraven/internal/testenv"
	"github.com/shipstream/bloodraven/topology"
)

func freePort(t *testing.T) int { return testenv.FreePort(t) }

type sites struct {
	iad, pdx *mariadblocal.Server
	group    *bloodravenv1alpha1.MysqlFailoverGroup
	driver   *Driver
}

// startSites starts two real MariaDB servers, pdx replicating from iad.
func startSites(t *testing.T) *sites {
	t.Helper()
	if err := mariadblocal.Available(); err != nil {
		t.Fatal(err) // CI installs it; a missing server is a failure, not a skip
	}
	ctx := context.Background()
	dir := t.TempDir()
	iad, err := mariadblocal.Start(ctx, dir+"/iad", "iad", freePort(t), 1, "bloodraven", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(iad.Kill)
	pdx, err := mariadblocal.Start(ctx, dir+"/pdx", "pdx", freePort(t), 2, "bloodraven", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pdx.Kill)
	if err := pdx.ReplicateFrom(ctx, iad); err != nil {
		t.Fatal(err)
	}
	g := &bloodravenv1alpha1.MysqlFailoverGroup{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "db"},
		Spec: bloodravenv1alpha1.MysqlFailoverGroupSpec{Sites: []bloodravenv1alpha1.Site{
			{Name: "iad", Host: "127.0.0.1", Port: int32(iad.Port)},
			{Name: "pdx", Host: "127.0.0.1", Port: int32(pdx.Port)},
		}}}
	d := New(Static(Account{User: "bloodraven", Password: "s3cret"}))
	t.Cleanup(d.Close)
	s := &sites{iad: iad, pdx: pdx, group: g, driver: d}
	s.waitReplicating(t, "pdx")
	return s
}

func (s *sites) state(t *testing.T, name string) (writable, replicating, reachable bool) {
	t.Helper()
	st, err := s.driver.Probe(context.Background(), s.group)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range st {
		if x.Name == name {
			return x.Writable, x.ReplicationRunning, x.Reachable
		}
	}
	t.Fatalf("no site %s", name)
	return
}

func (s *sites) waitReplicating(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, repl, _ := s.state(t, name); repl {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not replicating", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func open(t *testing.T, srv *mariadblocal.Server) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", srv.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func count(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM app.t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func fence(t *testing.T, db *sql.DB) (int64, string, error) {
	var gen int64
	var site string
	err := db.QueryRow(FenceQuery).Scan(&gen, &site)
	return gen, site, err
}

func TestProbeAgainstMariaDB(t *testing.T) {
	s := startSites(t)
	// Seconds_Behind_Master is briefly above 0 while a just-started replica
	// applies its first events (seen on a loaded machine: 3 s); the probe
	// must come to report the caught-up replica as lag 0.
	var st []topology.SiteState
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		if st, err = s.driver.Probe(context.Background(), s.group); err != nil {
			t.Fatal(err)
		}
		if st[1].LagSeconds == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if iad := st[0]; !iad.Reachable || !iad.Writable || iad.ReplicationRunning {
		t.Fatalf("iad = %+v, want reachable writable primary", iad)
	}
	if pdx := st[1]; !pdx.Reachable || pdx.Writable || !pdx.ReplicationRunning || pdx.LagSeconds != 0 {
		t.Fatalf("pdx = %+v, want reachable read-only replica", pdx)
	}
	s.pdx.Kill()
	st, _ = s.driver.Probe(context.Background(), s.group)
	if st[1].Reachable {
		t.Fatalf("killed pdx reported reachable: %+v", st[1])
	}
}

// A planned switchover under a concurrent writer loses no acknowledged row
// and leaves the old primary replicating from the new one; the fence table
// on the new primary holds the new generation.
func TestPlannedSwitchoverLosesNoAcknowledgedRow(t *testing.T) {
	s := startSites(t)
	iadDB, pdxDB := open(t, s.iad), open(t, s.pdx)
	if _, err := iadDB.Exec("CREATE DATABASE app"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"CREATE TABLE app.t (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT)",
		// The application's account: no SUPER, so read_only binds it.
		"CREATE USER 'app'@'%' IDENTIFIED BY 'app'", "GRANT ALL ON app.* TO 'app'@'%'",
	} {
		if _, err := iadDB.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	s.waitReplicating(t, "pdx")
	time.Sleep(300 * time.Millisecond)
	appDB := func(srv *mariadblocal.Server) *sql.DB {
		db, err := sql.Open("mysql", fmt.Sprintf("app:app@tcp(127.0.0.1:%d)/app?timeout=2s", srv.Port))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	appIad, appPdx := appDB(s.iad), appDB(s.pdx)
	// The writer writes to whichever site accepts the write.
	var acked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		dbs := []*sql.DB{appIad, appPdx}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			for _, db := range dbs {
				if _, err := db.Exec("INSERT INTO app.t (v) VALUES (?)", i); err == nil {
					acked.Add(1)
					break
				}
			}
		}
	}()
	time.Sleep(500 * time.Millisecond)
	before := acked.Load()
	start := time.Now()
	if err := s.driver.Promote(context.Background(), s.group, "pdx", 2, true); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("switchover took %v; %d rows acknowledged before it, %d in total", took, before, acked.Load())
	if before == 0 || acked.Load() <= before {
		t.Fatalf("the writer did not write through the switchover: %d before, %d total", before, acked.Load())
	}
	if got := int64(count(t, pdxDB)); got != acked.Load() {
		t.Fatalf("new primary has %d rows, %d were acknowledged", got, acked.Load())
	}
	w, _, _ := s.state(t, "iad")
	pw, _, _ := s.state(t, "pdx")
	if w || !pw {
		t.Fatalf("after switchover iad writable=%v pdx writable=%v", w, pw)
	}
	s.waitReplicating(t, "iad")
	deadline := time.Now().Add(10 * time.Second)
	for int64(count(t, iadDB)) != acked.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("old primary has %d rows, want %d", count(t, iadDB), acked.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
	gen, site, err := fence(t, pdxDB)
	if err != nil || gen != 2 || site != "pdx" {
		t.Fatalf("fence on pdx = %d %q %v", gen, site, err)
	}
	if _, _, err := fence(t, iadDB); !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("fence query on the read-only old primary: %v, want no rows", err)
	}
}

// Killing the primary leads to an emergency promotion; the returning old
// primary is fenced read-only before it is re-pointed; with errant
// transactions it stays fenced.
func TestEmergencyPromotionFencesTheReturningPrimary(t *testing.T) {
	s := startSites(t)
	ctx := context.Background()
	iadDB := open(t, s.iad)
	for _, q := range []string{"CREATE DATABASE app", "CREATE TABLE app.t (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT)", "INSERT INTO app.t (v) VALUES (1)"} {
		if _, err := iadDB.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	s.iad.Kill()
	if err := s.driver.Promote(ctx, s.group, "pdx", 2, false); err != nil {
		t.Fatal(err)
	}
	pdxDB := open(t, s.pdx)
	if gen, site, err := fence(t, pdxDB); err != nil || gen != 2 || site != "pdx" {
		t.Fatalf("fence after emergency = %d %q %v", gen, site, err)
	}
	if _, err := pdxDB.Exec("INSERT INTO app.t (v) VALUES (2)"); err != nil {
		t.Fatalf("new primary refuses writes: %v", err)
	}

	// The old primary returns — writable, as a restarted server is.
	if err := s.iad.Restart(); err != nil {
		t.Fatal(err)
	}
	if w, _, _ := s.state(t, "iad"); !w {
		t.Fatal("restarted old primary is not writable: the test would prove nothing")
	}
	if err := s.driver.Fence(ctx, s.group, "iad"); err != nil {
		t.Fatal(err)
	}
	if w, _, _ := s.state(t, "iad"); w {
		t.Fatal("fenced site still writable")
	}
	if err := s.driver.Rejoin(ctx, s.group, "iad", "pdx"); err != nil {
		t.Fatal(err)
	}
	s.waitReplicating(t, "iad")

	// Errant: pdx dies after a write only it has; iad is promoted; pdx
	// returns with a transaction iad never saw and is refused.
	if _, err := pdxDB.Exec("INSERT INTO app.t (v) VALUES (3)"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := open(t, s.iad).Exec("STOP SLAVE"); err != nil { // iad misses what pdx writes next
		t.Fatal(err)
	}
	if _, err := pdxDB.Exec("INSERT INTO app.t (v) VALUES (4)"); err != nil {
		t.Fatal(err)
	}
	s.pdx.Kill()
	if err := s.driver.Promote(ctx, s.group, "iad", 3, false); err != nil {
		t.Fatal(err)
	}
	if err := s.pdx.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := s.driver.Fence(ctx, s.group, "pdx"); err != nil {
		t.Fatal(err)
	}
	err := s.driver.Rejoin(ctx, s.group, "pdx", "iad")
	if !errors.Is(err, ErrErrantTransactions) {
		t.Fatalf("rejoin with an errant transaction: %v", err)
	}
	if w, repl, _ := s.state(t, "pdx"); w || repl {
		t.Fatalf("errant site writable=%v replicating=%v, want fenced and stopped", w, repl)
	}
}
