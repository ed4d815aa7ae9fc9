package mysql

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shipstream/bloodraven/topology"
)

// Issue 35, item 6 (docs/failover.md "a deposed leader never acts on the data
// plane"): a leader paused inside a planned promotion (in a dial, in
// FenceOthers' GTID wait, a VM pause, a long GC) resumes after a successor
// has moved the group. It confirms it still leads before it fences a site
// and again before it opens the target; when it does not, nothing more is
// fenced, nothing opened and nothing re-pointed. At e3e472e nothing tied SQL
// actions to leadership: the target was opened and the other site
// re-pointed at it; until the fence was checked too, a deposed leader made
// its successor's primary read-only.
func TestADeposedLeaderOpensNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		// leading is how many leadership checks pass before it is deposed.
		leading int32
		// checks it makes in all; whether iad ends fenced.
		checks    int32
		iadFenced bool
	}{
		{"deposed before it fences the old primary: fences nothing", 1, 2, false},
		{"deposed after the fence: opens nothing", 2, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startSites(t)
			var checks atomic.Int32
			ctx := topology.WithLeaderCheck(context.Background(), func(context.Context) (time.Duration, error) {
				if checks.Add(1) <= tc.leading {
					return 10 * time.Second, nil
				}
				return 0, errors.New("the leader-election Lease is held by the successor")
			})
			err := s.driver.Promote(ctx, s.group, "pdx", 2, true)
			if !errors.Is(err, topology.ErrNotLeading) {
				t.Fatalf("promotion by a deposed leader: %v, want ErrNotLeading", err)
			}
			var ue *topology.UnreachableError
			if errors.As(err, &ue) {
				t.Fatalf("a deposed leader's refusal is reported as an unreachable site: %v", err)
			}
			if checks.Load() != tc.checks {
				t.Fatalf("leadership confirmed %d times, want %d", checks.Load(), tc.checks)
			}
			if w, _, _ := s.state(t, "iad"); w == tc.iadFenced {
				t.Fatalf("iad writable %v, want fenced %v", w, tc.iadFenced)
			}
			if w, repl, _ := s.state(t, "pdx"); w || !repl {
				t.Fatalf("pdx writable %v replicating %v: a deposed leader opened (or detached) it", w, repl)
			}
			if _, _, err := fence(t, open(t, s.pdx)); err == nil {
				t.Fatal("a deposed leader wrote pdx's fence row")
			}
			// Re-pointing a site is an action too.
			if err := s.driver.Rejoin(ctx, s.group, "iad", "pdx"); !errors.Is(err, topology.ErrNotLeading) {
				t.Fatalf("rejoin by a deposed leader: %v, want ErrNotLeading", err)
			}
		})
	}
}

// The fence row never goes back: a promotion never replaces a newer move's
// row (a greater generation, or another site at the same one), and never
// opens a site while a reachable site carries one. At e3e472e the row was
// an unconditional REPLACE.
func TestTheFenceRowNeverGoesBack(t *testing.T) {
	s := startSites(t)
	ctx := context.Background()
	// A successor moved the group to pdx at generation 5.
	if err := s.driver.Promote(ctx, s.group, "pdx", 5, false); err != nil {
		t.Fatal(err)
	}
	s.waitReplicating(t, "iad")
	for _, tc := range []struct {
		name string
		gen  int64
	}{
		{"an older generation", 4},
		{"the same generation, another site", 5},
	} {
		err := s.driver.Promote(ctx, s.group, "iad", tc.gen, false)
		if !errors.Is(err, ErrNewerFence) {
			t.Fatalf("%s: promote iad: %v, want ErrNewerFence", tc.name, err)
		}
		if w, _, _ := s.state(t, "iad"); w {
			t.Fatalf("%s: iad was opened over a newer fence row", tc.name)
		}
	}
	// The conditional write itself, on a site that carries the newer row.
	iadDB := open(t, s.iad)
	if _, err := iadDB.Exec(fenceWrite, 4, "iad"); err != nil {
		t.Fatal(err)
	}
	var gen int64
	var site string
	if err := iadDB.QueryRow(fenceRead).Scan(&gen, &site); err != nil || gen != 5 || site != "pdx" {
		t.Fatalf("fence row after a write of an older generation: %d %s %v, want 5 pdx", gen, site, err)
	}
	if !NewerFence(5, "pdx", 5, "iad") || !NewerFence(6, "pdx", 5, "pdx") || NewerFence(5, "pdx", 5, "pdx") || NewerFence(4, "iad", 5, "pdx") {
		t.Fatal("NewerFence")
	}
}

// A transition that was rolled back may have left its fence row: the
// rollback puts the confirmed topology's row back (UndoTransition), so the
// old primary is reasserted at its own generation.
func TestARolledBackTransitionDoesNotBlockReassertion(t *testing.T) {
	s := startSites(t)
	ctx := context.Background()
	// The transition to pdx at 2 got as far as its fence row and the
	// re-pointing of iad, then was rolled back: pdx fenced.
	if err := s.driver.Promote(ctx, s.group, "pdx", 2, false); err != nil {
		t.Fatal(err)
	}
	if err := s.driver.Fence(ctx, s.group, "pdx"); err != nil {
		t.Fatal(err)
	}
	if err := s.driver.Promote(ctx, s.group, "iad", 1, false); !errors.Is(err, ErrNewerFence) {
		t.Fatalf("reassertion over the rolled-back transition's row: %v, want ErrNewerFence (the test would prove nothing)", err)
	}
	// iad receives the transition's row from pdx by replication. Roll back
	// once iad applied it: under load (CI at 46f2093) iad applied it after
	// the undo had passed it, and the reassertion then met it. That gap is
	// the driver's, noted in docs/failover.md ("Known gap"); this test
	// shows the case where the row had arrived.
	var pos string
	if err := open(t, s.pdx).QueryRow("SELECT @@global.gtid_binlog_pos").Scan(&pos); err != nil {
		t.Fatal(err)
	}
	var waited sql.NullInt64
	if err := open(t, s.iad).QueryRow("SELECT MASTER_GTID_WAIT(?, 8)", pos).Scan(&waited); err != nil || waited.Int64 != 0 {
		t.Fatalf("iad did not apply pdx's %s: %v %v", pos, waited, err)
	}
	if err := s.driver.UndoTransition(ctx, s.group, 2, "pdx", 1, "iad"); err != nil {
		t.Fatal(err)
	}
	if err := s.driver.Promote(ctx, s.group, "iad", 1, false); err != nil {
		t.Fatalf("reassertion after the rollback: %v", err)
	}
	if w, _, _ := s.state(t, "iad"); !w {
		t.Fatal("iad not reopened")
	}
	if gen, site, err := fence(t, open(t, s.iad)); err != nil || gen != 1 || site != "iad" {
		t.Fatalf("iad's fence row %d %s %v, want 1 iad", gen, site, err)
	}
}
