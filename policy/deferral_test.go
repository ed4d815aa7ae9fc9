package policy

import (
	"testing"
	"time"
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
