package controllers

import (
	"strings"
	"testing"
	"time"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// A planned operation whose step fails on every reconcile does not keep the
// observation from being written. The ordered update cannot update pdx (the
// driver fails every UpdateSite of it); then the primary, iad, is lost. Each
// reconcile returns the update's error, and still writes the health and
// PrimaryLostAt, so the detection budget starts at the first failed probe
// and the emergency failover comes within it. Before, the failing step
// returned before the observation: the loss was marked anew (at "now") on
// every reconcile and never persisted, and the budget never ran out.
func TestAFailingOperationStepStillRecordsTheObservation(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	f.admitFailingUpdate()
	if g := f.get(); g.Status.UpdatePhase != bloodravenv1alpha1.PhaseUpdatingReplicas || !g.Status.Health.Ready || g.Status.PrimaryLostAt != nil {
		t.Fatalf("setup: update phase %s, health %+v, primaryLostAt %v", g.Status.UpdatePhase, g.Status.Health, g.Status.PrimaryLostAt)
	}

	f.driver.Kill(f.group, "iad")
	killed := f.clock.Now()
	_, err := f.reconcileTolerant()
	if err == nil || !strings.Contains(err.Error(), "simulated rollout failure") {
		t.Fatalf("the operation's error is returned: got %v", err)
	}
	g := f.get()
	if g.Status.PrimaryLostAt == nil {
		t.Fatal("a failing operation step kept the lost primary from being recorded (status.primaryLostAt unset)")
	}
	if lost := g.Status.PrimaryLostAt.Time; lost.Before(killed.Truncate(time.Second)) || lost.After(killed.Add(time.Second)) {
		t.Fatalf("primaryLostAt %v; the primary was lost at %v", lost, killed)
	}
	if g.Status.Health.Ready || g.Status.Health.DegradedReason == "" {
		t.Fatalf("health not observed after a failing operation step: %+v", g.Status.Health)
	}
	if g.Status.UpdatePhase != bloodravenv1alpha1.PhaseUpdatingReplicas || g.Status.TopologyGeneration != 1 {
		t.Fatalf("update phase %s, generation %d: the observation changed more than the observation", g.Status.UpdatePhase, g.Status.TopologyGeneration)
	}

	// The mark stands while the update keeps failing: the budget runs out
	// and the emergency path promotes pdx within it.
	f.rounds(8, func(int) {})
	g = f.get()
	if g.Status.ActiveSite != "pdx" || g.Status.TopologyGeneration != 2 {
		t.Fatalf("no emergency failover while the ordered update keeps failing: active %s generation %d, primaryLostAt %v",
			g.Status.ActiveSite, g.Status.TopologyGeneration, g.Status.PrimaryLostAt)
	}
	if waited := g.Status.TopologyGenerationTime.Sub(killed); waited > 45*time.Second {
		t.Fatalf("promoted %v after the kill; budget 30 s", waited)
	}
}
