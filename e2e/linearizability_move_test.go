package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/childproc"
)

// moveClient is the history's client ID for the moves of the topology.
const moveClient = 99

// Four pipelines contend for the mutex while planned failovers move the
// primary of real MariaDB back and forth, each a generation bump that
// revokes the holder, and the leading operator is paused (SIGSTOP) for 4 s
// right after a move was requested: the requests it had in flight resume on
// views of the group read before the pause, just as the controller resumes
// and moves the topology. Each move is an operation of
// the history (called when requested, returned when the new generation was
// observed). The history must be linearizable against the contract's model:
// no operation holds the mutex across a bump (a holder's renewal after the
// move is 409 revoked, never 200), a revoked operation is never granted
// again, and never two holders.
func TestMutexHistoryIsLinearizableAcrossMovesAndAPausedLeader(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	ctx := context.Background()
	p, cfg := upPlayground(t)
	admin, key, g := bootstrapped(t, p)
	// Each operation renews 20 times, 50 ms apart: the mutex is held most
	// of the time, so the moves revoke holders.
	r := startMutexClients(t, p, cfg, func(m *mutexClient) { m.renewals, m.renewPause = 20, 50*time.Millisecond })
	time.Sleep(3 * time.Second)
	gen := g.Status.TopologyGeneration
	targets := []string{"pdx", "iad", "pdx", "iad", "pdx", "iad"}
	for i, target := range targets {
		request := func() {
			g := &bloodravenv1alpha1.MysqlFailoverGroup{}
			if err := admin.Get(ctx, key, g); err != nil {
				t.Fatal(err)
			}
			patch := client.MergeFrom(g.DeepCopy())
			g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: fmt.Sprintf("move-%d", i), TargetSite: target}
			if err := admin.Patch(ctx, g, patch); err != nil {
				t.Fatal(err)
			}
		}
		call := time.Now().UnixNano()
		if i == 2 {
			// Ask for the move and pause the leader at once, with the
			// pipelines' requests and the move's reconcile in flight (the
			// request must come first: the paused operator also serves the
			// webhook that admits it); let it resume into both.
			pid := p.Operator().Pid()
			request()
			if err := childproc.Stop(pid, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			paused := time.Now()
			time.Sleep(4 * time.Second)
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			t.Logf("the leading operator (pid %d) was paused for %v right after move %d was requested", pid, time.Since(paused).Round(time.Millisecond), i)
		} else {
			request()
		}
		waitFor(t, 90*time.Second, func() bool {
			_ = admin.Get(ctx, key, g)
			return g.Status.TopologyGeneration == gen+1 && g.Status.ActiveSite == target
		})
		ret := time.Now().UnixNano()
		gen++
		r.h.add(moveClient, mutexInput{verb: "move"}, call, mutexOutput{outcome: "ok", gen: gen}, ret)
		t.Logf("move %d to %s: generation %d after %v", i, target, gen, time.Duration(ret-call).Round(time.Millisecond))
		time.Sleep(2 * time.Second)
	}
	grants := r.grants()
	r.finish(t, nil)
	revoked := 0
	for k, n := range r.h.answers {
		if strings.Contains(k, " 409 revoked") {
			revoked += n
		}
	}
	t.Logf("%d grants; %d answers 409 revoked across %d moves", grants, revoked, len(targets))
	if revoked < len(targets)/2 {
		t.Fatalf("no move revoked a holder (answers %v): the scenario did not exercise the fence", r.h.answers)
	}
}
