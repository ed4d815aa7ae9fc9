package policy

import (
	"reflect"
	"strings"
	"testing"
	"time"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

func TestDecideDeferralBudget(t *testing.T) {
	first := t0
	budget := 10 * time.Minute
	end := first.Add(budget)
	tests := map[string]struct {
		in   DeferralBudgetInput
		want DeferralBudget
	}{
		"no budget: holds defer for as long as they live": {
			in:   DeferralBudgetInput{Now: end.Add(time.Hour), FirstDeferred: first},
			want: DeferralBudget{}},
		"a request never deferred has no running budget": {
			in:   DeferralBudgetInput{Now: t0, Max: budget},
			want: DeferralBudget{}},
		"just deferred: the budget runs, the warning comes at half": {
			in:   DeferralBudgetInput{Now: first, Max: budget, FirstDeferred: first},
			want: DeferralBudget{Running: true, ExhaustsAt: end, RecheckAt: first.Add(5 * time.Minute)}},
		"at half the warning is due once": {
			in:   DeferralBudgetInput{Now: first.Add(5 * time.Minute), Max: budget, FirstDeferred: first},
			want: DeferralBudget{Running: true, ExhaustsAt: end, Warn: true, RecheckAt: end}},
		"a recorded warning is not repeated": {
			in:   DeferralBudgetInput{Now: first.Add(7 * time.Minute), Max: budget, FirstDeferred: first, Warned: true},
			want: DeferralBudget{Running: true, ExhaustsAt: end, RecheckAt: end}},
		"at exactly the end the budget is spent": {
			in:   DeferralBudgetInput{Now: end, Max: budget, FirstDeferred: first, Warned: true},
			want: DeferralBudget{Running: true, ExhaustsAt: end, Spent: true, Exhaust: true}},
		"a nanosecond before the end it is not": {
			in:   DeferralBudgetInput{Now: end.Add(-time.Nanosecond), Max: budget, FirstDeferred: first, Warned: true},
			want: DeferralBudget{Running: true, ExhaustsAt: end, RecheckAt: end}},
		"spent and recorded: still spent, nothing more to emit": {
			in:   DeferralBudgetInput{Now: end.Add(time.Hour), Max: budget, FirstDeferred: first, Warned: true, Exhausted: true},
			want: DeferralBudget{Running: true, ExhaustsAt: end, Spent: true}},
		"spent before the warning was seen: exhausted, not warned after the fact": {
			in:   DeferralBudgetInput{Now: end.Add(time.Second), Max: budget, FirstDeferred: first},
			want: DeferralBudget{Running: true, ExhaustsAt: end, Spent: true, Exhaust: true}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := DecideDeferralBudget(tc.in); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// The emergency path's decision takes nothing of the deferral budget: no
// field of its input names a deferral, a budget or a hold.
func TestTheSafetyDecisionHasNoDeferralInput(t *testing.T) {
	typ := reflect.TypeOf(SafetyInput{})
	for i := 0; i < typ.NumField(); i++ {
		name := strings.ToLower(typ.Field(i).Name)
		for _, banned := range []string{"deferral", "hold", "lease"} {
			if strings.Contains(name, banned) {
				t.Errorf("SafetyInput.%s: the emergency path must not read %s state", typ.Field(i).Name, banned)
			}
		}
	}
}

func TestDeferralBudgetStands(t *testing.T) {
	b := bloodravenv1alpha1.DeferralBudget{Operation: bloodravenv1alpha1.OperationPlannedFailover, ID: "req-1"}
	reqs := []Request{{Operation: bloodravenv1alpha1.OperationPlannedFailover, ID: "req-1"}}
	tests := map[string]struct {
		reqs   []Request
		status bloodravenv1alpha1.OperationStatus
		want   bool
	}{
		"a deferred request keeps its budget":      {reqs, bloodravenv1alpha1.OperationStatus{ID: "req-1", Phase: bloodravenv1alpha1.PhaseDeferred}, true},
		"a request being admitted keeps it":        {reqs, bloodravenv1alpha1.OperationStatus{ID: "req-1", Phase: bloodravenv1alpha1.PhaseAdmitting}, true},
		"a completed request drops it":             {reqs, bloodravenv1alpha1.OperationStatus{ID: "req-1", Phase: bloodravenv1alpha1.PhaseCompleted}, false},
		"a failed request drops it":                {reqs, bloodravenv1alpha1.OperationStatus{ID: "req-1", Phase: bloodravenv1alpha1.PhaseFailed}, false},
		"a removed request drops it":               {nil, bloodravenv1alpha1.OperationStatus{ID: "req-1", Phase: bloodravenv1alpha1.PhaseDeferred}, false},
		"a replaced request drops it":              {[]Request{{Operation: bloodravenv1alpha1.OperationPlannedFailover, ID: "req-2"}}, bloodravenv1alpha1.OperationStatus{}, false},
		"an earlier request's completion keeps it": {reqs, bloodravenv1alpha1.OperationStatus{ID: "req-0", Phase: bloodravenv1alpha1.PhaseCompleted}, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := DeferralBudgetStands(b, tc.reqs, tc.status); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	if DeferralBudgetSpent([]bloodravenv1alpha1.DeferralBudget{b}) || !DeferralBudgetSpent([]bloodravenv1alpha1.DeferralBudget{b, {Exhausted: true}}) {
		t.Fatal("DeferralBudgetSpent")
	}
}
