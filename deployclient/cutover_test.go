package deployclient

import (
	"strings"
	"testing"
	"time"
)

func TestACutOverIsDecidedOnTheGenerationTheGroupAndTheDeadline(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	allowed := func() *Group {
		return &Group{TopologyGeneration: 7, Stable: true, CutOver: &CutOver{Allowed: true, MarginSeconds: 10}}
	}
	tests := map[string]struct {
		group    func(*Group)
		deadline time.Duration // from now
		budget   time.Duration // 20 s when zero
		reason   string
		message  string
	}{
		"a stable group at the grant's generation with time left allows it": {deadline: 25 * time.Second},
		"a moved generation refuses it first": {group: func(g *Group) {
			g.TopologyGeneration = 8
			g.CutOver = &CutOver{Reason: CutOverGroupUnstable, Message: "the group is not stable: TopologyTransition"}
		}, deadline: 25 * time.Second, reason: CutOverGenerationMoved, message: "generation 8, the run was granted at 7"},
		"the group's refusal is the run's": {group: func(g *Group) {
			g.CutOver = &CutOver{Reason: CutOverPlannedOperationPending, Message: `PlannedFailover "req-1" is Deferred (DeploymentHold)`, MarginSeconds: 10}
		}, deadline: 25 * time.Second, reason: CutOverPlannedOperationPending, message: "Deferred"},
		"a deferral budget within the run's own budget is due": {group: func(g *Group) {
			g.Admission = &Admission{Operation: "PlannedFailover", ID: "req-1", BudgetExhaustsAt: now.Add(20 * time.Second).Format(time.RFC3339Nano)}
		}, deadline: 25 * time.Second, budget: 30 * time.Second, reason: CutOverPlannedOperationDue, message: `"req-1"`},
		"a deferral budget past the run's budget is not due": {group: func(g *Group) {
			g.Admission = &Admission{Operation: "PlannedFailover", ID: "req-1", BudgetExhaustsAt: now.Add(21 * time.Second).Format(time.RFC3339Nano)}
		}, deadline: 25 * time.Second},
		"a deadline closer than the budget refuses it": {deadline: 29 * time.Second, budget: 30 * time.Second, reason: CutOverDeadlineTooClose, message: "less than the cut-over budget 30s"},
		"a deadline already passed refuses it":         {deadline: -time.Second, reason: CutOverDeadlineTooClose, message: "0s away"},
		"an older operator's unstable group refuses it": {group: func(g *Group) {
			g.CutOver, g.Stable, g.UnstableReason = nil, false, "PlannedFailoverDeferred"
		}, deadline: 25 * time.Second, reason: CutOverGroupUnstable, message: "PlannedFailoverDeferred"},
		"an older operator's stable group allows it": {group: func(g *Group) { g.CutOver = nil }, deadline: 25 * time.Second},
		"a refusal without a reason is still a refusal": {group: func(g *Group) { g.CutOver = &CutOver{Message: "?"} },
			deadline: 25 * time.Second, reason: CutOverGroupUnstable},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := allowed()
			if tc.group != nil {
				tc.group(g)
			}
			budget := tc.budget
			if budget == 0 {
				budget = 20 * time.Second
			}
			d := DecideCutOver(CutOverInput{Now: now, Observation: g, GrantGeneration: 7, Deadline: now.Add(tc.deadline), Budget: budget})
			if d.Allowed != (tc.reason == "") || d.Reason != tc.reason || !strings.Contains(d.Message, tc.message) {
				t.Fatalf("DecideCutOver = %+v, want reason %q with a message naming %q", d, tc.reason, tc.message)
			}
		})
	}
}
