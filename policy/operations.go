package policy

import bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"

// OperationStep is what a planned operation does next. The controller acts
// on it in one switch per operation, persists the progress, and asks again.
type OperationStep int

// Steps of planned operations.
const (
	// StepNone: nothing to do (no request, or the request is finished).
	StepNone OperationStep = iota
	// StepWaitBootstrap: the group has no confirmed primary yet.
	StepWaitBootstrap
	// StepWaitTransition: a transition is under way; the safety paths own
	// it and advance the operation when it completes.
	StepWaitTransition
	// StepAdmit: pass the admission gate (defer behind a live hold, or
	// reserve).
	StepAdmit
	// StepPromote: announce and perform the promotion.
	StepPromote
	// StepComplete: the operation's goal already holds; record it.
	StepComplete
	// StepUpdateReplicas: apply the revision to every site but the primary.
	StepUpdateReplicas
	// StepUpdateAll: apply the revision to every site (the former primary
	// included), then complete.
	StepUpdateAll
	// StepRestore: restore the target's data in place.
	StepRestore
	// StepInvalid: the phase is not one this operation knows.
	StepInvalid
)

// PlannedFailoverInput is what the next step of a planned failover depends
// on.
type PlannedFailoverInput struct {
	Requested  bool
	Phase      bloodravenv1alpha1.PlannedFailoverPhase
	Target     string
	ActiveSite string
	Transition bool
	Reserved   bool
}

// NextPlannedFailoverStep: Admitting → (Deferred) → Promoting → Completed.
func NextPlannedFailoverStep(in PlannedFailoverInput) OperationStep {
	switch {
	case !in.Requested:
		return StepNone
	case in.Phase == bloodravenv1alpha1.PlannedFailoverPhaseCompleted || in.Phase == bloodravenv1alpha1.PlannedFailoverPhaseFailed:
		return StepNone
	case in.Phase == bloodravenv1alpha1.PlannedFailoverPhasePromoting && in.Transition:
		return StepWaitTransition
	case in.Phase == bloodravenv1alpha1.PlannedFailoverPhasePromoting && in.ActiveSite == in.Target:
		return StepComplete
	case in.Phase == bloodravenv1alpha1.PlannedFailoverPhasePromoting:
		return StepPromote // reserved, not yet announced
	case in.ActiveSite == "":
		return StepWaitBootstrap
	case in.Target == in.ActiveSite && !in.Reserved:
		return StepComplete // already active
	}
	return StepAdmit
}

// OrderedUpdateInput is what the next step of an ordered update depends on.
type OrderedUpdateInput struct {
	Revision, UpdatedRevision string
	ActiveSite                string
	Phase                     bloodravenv1alpha1.OperationPhase
	Transition                bool
}

// NextOrderedUpdateStep: Admitting → (Deferred) → UpdatingReplicas →
// FailingOver → UpdatingFormerPrimary → Completed.
func NextOrderedUpdateStep(in OrderedUpdateInput) OperationStep {
	if in.Revision == "" || in.Revision == in.UpdatedRevision || in.ActiveSite == "" {
		return StepNone
	}
	switch in.Phase {
	case bloodravenv1alpha1.PhaseNone, bloodravenv1alpha1.PhaseCompleted, bloodravenv1alpha1.PhaseFailed, bloodravenv1alpha1.PhaseAdmitting, bloodravenv1alpha1.PhaseDeferred:
		return StepAdmit
	case bloodravenv1alpha1.PhaseUpdatingReplicas:
		return StepUpdateReplicas
	case bloodravenv1alpha1.PhaseFailingOver:
		if in.Transition {
			return StepWaitTransition
		}
		return StepPromote
	case bloodravenv1alpha1.PhaseUpdatingFormerPrimary:
		return StepUpdateAll
	}
	return StepInvalid
}

// RestoreInPlaceInput is what the next step of a restore-in-place depends
// on.
type RestoreInPlaceInput struct {
	Requested  bool
	ActiveSite string
	Phase      bloodravenv1alpha1.OperationPhase
	Transition bool
}

// NextRestoreInPlaceStep: Admitting → (Deferred) → Restoring → Promoting →
// Completed.
func NextRestoreInPlaceStep(in RestoreInPlaceInput) OperationStep {
	if !in.Requested || in.ActiveSite == "" {
		return StepNone
	}
	switch in.Phase {
	case bloodravenv1alpha1.PhaseCompleted, bloodravenv1alpha1.PhaseFailed:
		return StepNone
	case bloodravenv1alpha1.PhaseNone, bloodravenv1alpha1.PhaseAdmitting, bloodravenv1alpha1.PhaseDeferred:
		return StepAdmit
	case bloodravenv1alpha1.PhaseRestoring:
		return StepRestore
	case bloodravenv1alpha1.PhasePromoting:
		if in.Transition {
			return StepWaitTransition
		}
		return StepPromote
	}
	return StepInvalid
}
