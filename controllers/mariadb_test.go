package controllers

import (
	"context"
	"errors"
	"testing"
	"time"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/mariadblocal"
	"github.com/shipstream/bloodraven/internal/testenv"
	mysqldriver "github.com/shipstream/bloodraven/topology/mysql"
)

// realSites starts two real MariaDB servers, pdx replicating from iad, and
// points the fixture's group and controller at them through the SQL driver
// wrapped in a faultyDriver.
func realSites(t *testing.T, f *fixture) (iad, pdx *mariadblocal.Server, fd *faultyDriver) {
	t.Helper()
	if err := mariadblocal.Available(); err != nil {
		t.Fatal(err) // CI installs it; a missing server is a failure, not a skip
	}
	ctx := context.Background()
	dir := t.TempDir()
	var err error
	if iad, err = mariadblocal.Start(ctx, dir+"/iad", "iad", testenv.FreePort(t), 1, "bloodraven", "s3cret"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(iad.Kill)
	if pdx, err = mariadblocal.Start(ctx, dir+"/pdx", "pdx", testenv.FreePort(t), 2, "bloodraven", "s3cret"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pdx.Kill)
	if err := pdx.ReplicateFrom(ctx, iad); err != nil {
		t.Fatal(err)
	}
	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
		g.Spec.Sites = []bloodravenv1alpha1.Site{{Name: "iad", Host: "127.0.0.1", Port: int32(iad.Port)}, {Name: "pdx", Host: "127.0.0.1", Port: int32(pdx.Port)}}
	})
	f.group = f.get()
	d := mysqldriver.New(mysqldriver.Static(mysqldriver.Account{User: "bloodraven", Password: "s3cret"}))
	t.Cleanup(d.Close)
	fd = &faultyDriver{Driver: d}
	f.rec.Driver = fd
	return iad, pdx, fd
}

// writable asks each running server for @@global.read_only, as root over its
// socket; a stopped server is not writable.
func writableServers(t *testing.T, servers ...*mariadblocal.Server) []string {
	t.Helper()
	var out []string
	for _, s := range servers {
		db, err := s.Root()
		if err != nil {
			continue
		}
		var ro int
		err = db.QueryRowContext(context.Background(), "SELECT @@global.read_only").Scan(&ro)
		db.Close()
		if err == nil && ro == 0 {
			out = append(out, s.Name)
		}
	}
	return out
}

// Defect 5 with real MariaDB: an interrupted promotion never leaves two
// writable sites, shown by @@read_only on both servers after every step.
func TestInterruptedPromotionOfRealMariaDB(t *testing.T) {
	step := func(t *testing.T, f *fixture, rounds int, servers ...*mariadblocal.Server) {
		t.Helper()
		f.rounds(rounds, func(i int) {
			if w := writableServers(t, servers...); len(w) > 1 {
				t.Fatalf("round %d: two writable sites %v", i, w)
			}
		})
	}
	t.Run("the target dies right after it was opened", func(t *testing.T) {
		f := newFixture(t, false)
		iad, pdx, fd := realSites(t, f)
		step(t, f, 3, iad, pdx)
		if g := f.get(); g.Status.ActiveSite != "iad" || g.Status.TopologyGeneration != 1 {
			t.Fatalf("bootstrap: %s/%d", g.Status.ActiveSite, g.Status.TopologyGeneration)
		}
		inner := fd.Driver
		fd.promote = func(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, site string, gen int64, planned bool) error {
			if err := inner.Promote(ctx, g, site, gen, planned); err != nil {
				return err
			}
			fd.promote = nil
			// The old primary replicates the target's fence writes back, then
			// the target is lost with the answer: the resumed promotion must
			// not wait for the target's own writes as if they were to apply.
			deadline := time.Now().Add(20 * time.Second)
			for time.Now().Before(deadline) {
				if gtids, _ := inner.(*mysqldriver.Driver).GTIDs(ctx, g); gtids["iad"] != "" && gtids["iad"] == gtids["pdx"] {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			pdx.Kill()
			return errors.New("connection lost")
		}
		f.rec.PromoteTimeout = time.Minute
		f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
			g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: "req-1", TargetSite: "pdx"}
		})
		step(t, f, 8, iad, pdx) // minutes pass with pdx down: iad must stay read-only
		if w := writableServers(t, iad); len(w) != 0 {
			t.Fatalf("the old primary was reopened while the promoted target is unreachable")
		}
		if err := pdx.Restart(); err != nil { // comes back writable, as a restarted server does
			t.Fatal(err)
		}
		if w := writableServers(t, iad, pdx); len(w) > 1 {
			t.Fatalf("after the target restarted: two writable sites %v", w)
		}
		for i := 0; i < 12 && f.get().Status.TopologyGeneration != 2; i++ {
			step(t, f, 1, iad, pdx)
		}
		g := f.get()
		if g.Status.ActiveSite != "pdx" || g.Status.TopologyGeneration != 2 || g.Status.Transition != nil {
			t.Fatalf("the transition did not complete: %s/%d %+v %+v; events %v", g.Status.ActiveSite, g.Status.TopologyGeneration,
				g.Status.Transition, g.Status.PlannedFailover, f.events("TransitionRolledBack", 0))
		}
		if w := writableServers(t, iad, pdx); len(w) != 1 || w[0] != "pdx" {
			t.Fatalf("writable after completion: %v", w)
		}
	})
	t.Run("a promotion that keeps failing is rolled back", func(t *testing.T) {
		f := newFixture(t, false)
		iad, pdx, fd := realSites(t, f)
		step(t, f, 3, iad, pdx)
		inner := fd.Driver
		fd.promote = func(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, site string, gen int64, planned bool) error {
			if site != "pdx" { // reasserting the old primary works
				return inner.Promote(ctx, g, site, gen, planned)
			}
			_ = inner.Fence(ctx, g, "iad") // a planned promotion stops writes on the old primary first
			return errors.New("the target did not catch up")
		}
		f.rec.PromoteTimeout = time.Minute
		f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
			g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: "req-1", TargetSite: "pdx"}
		})
		step(t, f, 12, iad, pdx)
		g := f.get()
		if g.Status.ActiveSite != "iad" || g.Status.TopologyGeneration != 1 || g.Status.Transition != nil || g.Status.PlannedFailover.Phase != bloodravenv1alpha1.PlannedFailoverPhaseFailed {
			t.Fatalf("not rolled back: %s/%d %+v %+v", g.Status.ActiveSite, g.Status.TopologyGeneration, g.Status.Transition, g.Status.PlannedFailover)
		}
		if w := writableServers(t, iad, pdx); len(w) != 1 || w[0] != "iad" {
			t.Fatalf("writable after the rollback: %v, want the old primary iad reopened", w)
		}
	})
}
