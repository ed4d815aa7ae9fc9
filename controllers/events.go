package controllers

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
)

// eventKind is one kind of Event on a MysqlFailoverGroup or MysqlDatabase.
type eventKind struct {
	Type    string
	Reason  string
	Message string // fmt format
}

// The Events this controller emits, declared once.
var (
	EventDeploymentLeaseRevoked  = eventKind{corev1.EventTypeWarning, "DeploymentLeaseRevoked", "revoked deployment leases: reason %s, topologyGeneration %d, operations %v"}
	EventPlannedFailoverDeferred = eventKind{corev1.EventTypeNormal, "PlannedFailoverDeferred", "%s %s deferred until %s: %s"}
	EventBootstrapped            = eventKind{corev1.EventTypeNormal, "Bootstrapped", "site %s is the first confirmed primary (topologyGeneration %d)"}
	EventPromoted                = eventKind{corev1.EventTypeNormal, "Promoted", "%s promoted site %s (topologyGeneration %d)"}
	EventEmergencyFailover       = eventKind{corev1.EventTypeWarning, "EmergencyFailover", "active site %s unreachable for %s: promoting %s"}
	EventSiteFenced              = eventKind{corev1.EventTypeWarning, "SiteFenced", "fenced site %s (made read-only): %s"}
	EventOperationCompleted      = eventKind{corev1.EventTypeNormal, "OperationCompleted", "%s %s completed"}
	EventOperationFailed         = eventKind{corev1.EventTypeWarning, "OperationFailed", "%s %s failed: %s"}
	EventOperationWaiting        = eventKind{corev1.EventTypeWarning, "OperationWaiting", "%s %s waits, no transition written: %s"}
	EventTransitionRolledBack    = eventKind{corev1.EventTypeWarning, "TransitionRolledBack", "%s rolled back: site %s fenced read-only, generation unchanged: %s"}
	EventDeferralBudgetWarning   = eventKind{corev1.EventTypeWarning, "DeferralBudgetWarning", "%s %s: half of its deferral budget is spent; at %s live failover-holds are revoked and it proceeds"}
	EventDeferralBudgetExhausted = eventKind{corev1.EventTypeWarning, "DeferralBudgetExhausted", "%s %s: its deferral budget (%s from %s) is spent: live failover-holds are revoked (deferral_budget_exhausted), new ones refused until it has run, and it proceeds"}
	// On a MysqlDatabase.
	EventSchemaVerificationRequired = eventKind{corev1.EventTypeWarning, "SchemaVerificationRequired", "migration %s (topologyGeneration %d) ended (%s) after its DDL boundary without confirming its end: no new migration until a person checks the schema and sets %s=%s"}
	EventSchemaVerified             = eventKind{corev1.EventTypeNormal, "SchemaVerified", "migration %s verified: new migrations may be granted"}
)

// allEvents is every Event above; docs/events.md documents each.
var allEvents = []eventKind{EventDeploymentLeaseRevoked, EventPlannedFailoverDeferred, EventBootstrapped, EventPromoted,
	EventEmergencyFailover, EventSiteFenced, EventOperationCompleted, EventOperationFailed, EventOperationWaiting, EventTransitionRolledBack,
	EventSchemaVerificationRequired, EventSchemaVerified, EventDeferralBudgetWarning, EventDeferralBudgetExhausted}

func (e eventKind) emit(r record.EventRecorder, obj runtime.Object, args ...any) {
	if r == nil {
		return
	}
	r.Event(obj, e.Type, e.Reason, fmt.Sprintf(e.Message, args...))
}
