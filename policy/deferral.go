package policy

import (
	"slices"
	"time"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// DeferralBudgetInput is what a planned-operation request's deferral budget
// (MysqlFailoverGroup.spec.maxDeferralSeconds) depends on. The budget is
// cumulative per request: it runs from the request's first deferral by a
// hold, whether or not the request is deferred at every moment after.
type DeferralBudgetInput struct {
	Now time.Time
	// Max is spec.maxDeferralSeconds; zero or less: no budget (the holds
	// defer the request for as long as they live, the seeds' behaviour).
	Max time.Duration
	// FirstDeferred is when a hold first deferred this request; zero: it
	// never was.
	FirstDeferred time.Time
	// Warned and Exhausted say whether DeferralBudgetWarning and
	// DeferralBudgetExhausted were already recorded for this request.
	Warned, Exhausted bool
}

// DeferralBudget is the decision.
type DeferralBudget struct {
	// Running: there is a budget and it has started; ExhaustsAt is then
	// admission.budgetExhaustsAt.
	Running    bool
	ExhaustsAt time.Time
	// Spent: the budget is used up. Live holds no longer defer the request:
	// each is revoked (reason deferral_budget_exhausted), new hold grants
	// are refused until the operation has run, and the operation proceeds.
	Spent bool
	// Warn and Exhaust: record (and emit) DeferralBudgetWarning or
	// DeferralBudgetExhausted now; each happens once per request.
	Warn, Exhaust bool
	// RecheckAt is when this decision next changes (half of the budget,
	// then its end); zero when it no longer will.
	RecheckAt time.Time
}

// DecideDeferralBudget applies the deferral budget. Half of it spent warns;
// all of it spent (at exactly ExhaustsAt too) ends the holds' deferral.
// Emergency paths never call it.
func DecideDeferralBudget(in DeferralBudgetInput) DeferralBudget {
	if in.Max <= 0 || in.FirstDeferred.IsZero() {
		return DeferralBudget{}
	}
	half := in.FirstDeferred.Add(in.Max / 2)
	end := in.FirstDeferred.Add(in.Max)
	d := DeferralBudget{Running: true, ExhaustsAt: end}
	switch {
	case !in.Now.Before(end):
		d.Spent = true
		d.Exhaust = !in.Exhausted
		// Exhaustion implies the warning: a budget spent before anyone
		// looked (a leader change) is not warned about after the fact.
	case !in.Now.Before(half):
		d.Warn = !in.Warned
		d.RecheckAt = end
	default:
		d.RecheckAt = half
	}
	return d
}

// DeferralBudgetStands tells whether a recorded budget still belongs to a
// request that has not run: the spec still asks for its operation with its
// ID, and that operation's status for the ID is neither Completed nor
// Failed. A budget that no longer stands is dropped, and with it the
// refusal of hold grants (409 deferral_budget_exhausted).
func DeferralBudgetStands(b bloodravenv1alpha1.DeferralBudget, requests []Request, status bloodravenv1alpha1.OperationStatus) bool {
	if !slices.Contains(requests, Request{Operation: b.Operation, ID: b.ID}) {
		return false
	}
	if status.ID == b.ID && (status.Phase == bloodravenv1alpha1.PhaseCompleted || status.Phase == bloodravenv1alpha1.PhaseFailed) {
		return false
	}
	return true
}

// DeferralBudgetSpent tells whether any request's budget is spent: hold
// grants are refused until it no longer stands.
func DeferralBudgetSpent(budgets []bloodravenv1alpha1.DeferralBudget) bool {
	for _, b := range budgets {
		if b.Exhausted {
			return true
		}
	}
	return false
}
