package policy

import (
	"testing"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

func TestNextPlannedFailoverStep(t *testing.T) {
	base := PlannedFailoverInput{Requested: true, Target: "pdx", ActiveSite: "iad"}
	with := func(f func(*PlannedFailoverInput)) PlannedFailoverInput { in := base; f(&in); return in }
	tests := map[string]struct {
		in   PlannedFailoverInput
		want OperationStep
	}{
		"no request":                           {in: PlannedFailoverInput{}, want: StepNone},
		"a new request is admitted first":      {in: with(func(in *PlannedFailoverInput) { in.Phase = bloodravenv1alpha1.PlannedFailoverPhaseAdmitting }), want: StepAdmit},
		"a deferred request is admitted again": {in: with(func(in *PlannedFailoverInput) { in.Phase = bloodravenv1alpha1.PlannedFailoverPhaseDeferred }), want: StepAdmit},
		"before bootstrap it waits":            {in: with(func(in *PlannedFailoverInput) { in.ActiveSite = "" }), want: StepWaitBootstrap},
		"the target is already active":         {in: with(func(in *PlannedFailoverInput) { in.Target = "iad" }), want: StepComplete},
		"promoting, the transition is the safety paths' own": {in: with(func(in *PlannedFailoverInput) {
			in.Phase, in.Transition = bloodravenv1alpha1.PlannedFailoverPhasePromoting, true
		}), want: StepWaitTransition},
		"promoting, reserved but not announced": {in: with(func(in *PlannedFailoverInput) {
			in.Phase, in.Reserved = bloodravenv1alpha1.PlannedFailoverPhasePromoting, true
		}), want: StepPromote},
		"promoting, the target became active": {in: with(func(in *PlannedFailoverInput) {
			in.Phase, in.ActiveSite = bloodravenv1alpha1.PlannedFailoverPhasePromoting, "pdx"
		}), want: StepComplete},
		"completed": {in: with(func(in *PlannedFailoverInput) { in.Phase = bloodravenv1alpha1.PlannedFailoverPhaseCompleted }), want: StepNone},
		"failed":    {in: with(func(in *PlannedFailoverInput) { in.Phase = bloodravenv1alpha1.PlannedFailoverPhaseFailed }), want: StepNone},
	}
	for name, tc := range tests {
		if got := NextPlannedFailoverStep(tc.in); got != tc.want {
			t.Errorf("%s: %d, want %d", name, got, tc.want)
		}
	}
}

func TestNextOrderedUpdateStep(t *testing.T) {
	in := func(phase bloodravenv1alpha1.OperationPhase, transition bool) OrderedUpdateInput {
		return OrderedUpdateInput{Revision: "r7", ActiveSite: "iad", Phase: phase, Transition: transition}
	}
	tests := map[string]struct {
		in   OrderedUpdateInput
		want OperationStep
	}{
		"no revision":                        {in: OrderedUpdateInput{ActiveSite: "iad"}, want: StepNone},
		"the revision is already applied":    {in: OrderedUpdateInput{Revision: "r7", UpdatedRevision: "r7", ActiveSite: "iad"}, want: StepNone},
		"before bootstrap":                   {in: OrderedUpdateInput{Revision: "r7"}, want: StepNone},
		"a new revision is admitted first":   {in: in(bloodravenv1alpha1.PhaseNone, false), want: StepAdmit},
		"after a failed one, admitted again": {in: in(bloodravenv1alpha1.PhaseFailed, false), want: StepAdmit},
		"replicas first":                     {in: in(bloodravenv1alpha1.PhaseUpdatingReplicas, false), want: StepUpdateReplicas},
		"then the failover":                  {in: in(bloodravenv1alpha1.PhaseFailingOver, false), want: StepPromote},
		"a failover under way is waited for": {in: in(bloodravenv1alpha1.PhaseFailingOver, true), want: StepWaitTransition},
		"then every site":                    {in: in(bloodravenv1alpha1.PhaseUpdatingFormerPrimary, false), want: StepUpdateAll},
		"a phase of another operation":       {in: in(bloodravenv1alpha1.PhaseRestoring, false), want: StepInvalid},
	}
	for name, tc := range tests {
		if got := NextOrderedUpdateStep(tc.in); got != tc.want {
			t.Errorf("%s: %d, want %d", name, got, tc.want)
		}
	}
}

func TestNextRestoreInPlaceStep(t *testing.T) {
	in := func(phase bloodravenv1alpha1.OperationPhase, transition bool) RestoreInPlaceInput {
		return RestoreInPlaceInput{Requested: true, ActiveSite: "iad", Phase: phase, Transition: transition}
	}
	tests := map[string]struct {
		in   RestoreInPlaceInput
		want OperationStep
	}{
		"no request":                          {in: RestoreInPlaceInput{ActiveSite: "iad"}, want: StepNone},
		"admitted first":                      {in: in(bloodravenv1alpha1.PhaseAdmitting, false), want: StepAdmit},
		"then restored":                       {in: in(bloodravenv1alpha1.PhaseRestoring, false), want: StepRestore},
		"then promoted":                       {in: in(bloodravenv1alpha1.PhasePromoting, false), want: StepPromote},
		"a promotion under way is waited for": {in: in(bloodravenv1alpha1.PhasePromoting, true), want: StepWaitTransition},
		"completed":                           {in: in(bloodravenv1alpha1.PhaseCompleted, false), want: StepNone},
		"a phase of another operation":        {in: in(bloodravenv1alpha1.PhaseFailingOver, false), want: StepInvalid},
	}
	for name, tc := range tests {
		if got := NextRestoreInPlaceStep(tc.in); got != tc.want {
			t.Errorf("%s: %d, want %d", name, got, tc.want)
		}
	}
}
