package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeployRunOutcome is how a migration operation ended: what its client
// reported on release (X-Deploy-Outcome), or, without a report, how its
// lease ended.
type DeployRunOutcome string

// Outcomes of a DeployRun.
const (
	// DeployRunRunning: the operation still holds the mutex.
	DeployRunRunning DeployRunOutcome = "running"
	// Reported by the client on release (docs/gate.md).
	DeployRunSucceeded     DeployRunOutcome = "succeeded"
	DeployRunFailed        DeployRunOutcome = "failed"
	DeployRunLostBeforeDDL DeployRunOutcome = "lost-before-ddl"
	DeployRunLostAfterDDL  DeployRunOutcome = "lost-after-ddl"
	DeployRunAbortFailed   DeployRunOutcome = "abort-failed"
	// Without a report: the lease's end (status.leaseEnd).
	DeployRunReleased DeployRunOutcome = "released"
	DeployRunRevoked  DeployRunOutcome = "revoked"
	DeployRunExpired  DeployRunOutcome = "expired"
	// DeployRunUnknown: the operation ended, but its lease record was
	// replaced before the operator saw how.
	DeployRunUnknown DeployRunOutcome = "unknown"
)

// LeaseEnd is how an operation's migration lease ended, whatever its client
// reported.
type LeaseEnd string

// Lease ends.
const (
	LeaseReleased LeaseEnd = "released"
	LeaseRevoked  LeaseEnd = "revoked"
	LeaseExpired  LeaseEnd = "expired"
	LeaseUnknown  LeaseEnd = "unknown"
)

// DeployRunSpec names the migration operation a DeployRun records.
type DeployRunSpec struct {
	// GroupRef is the MysqlFailoverGroup (same namespace) whose mutex the
	// operation held.
	GroupRef GroupReference `json:"groupRef"`

	// Instance is the MysqlDatabase the operation migrated.
	Instance string `json:"instance"`

	// OperationID is the deployment operation's ID.
	OperationID string `json:"operationId"`

	// Caller is the user name of the identity that was granted the mutex.
	Caller string `json:"caller"`

	// GrantGeneration is the topology generation the mutex was granted at.
	GrantGeneration int64 `json:"grantGeneration"`
}

// DeployRunStatus is what became of the operation, projected from its
// migration lease record. Written by the operator only.
type DeployRunStatus struct {
	// Outcome of the run: running while the operation holds the mutex;
	// then its client's report on release (X-Deploy-Outcome: succeeded,
	// failed, lost-before-ddl, lost-after-ddl, abort-failed), or without a
	// report the lease's end (released, revoked, expired, unknown).
	// +optional
	Outcome DeployRunOutcome `json:"outcome,omitempty"`

	// Phase is the DDL boundary the run reached, as its renewals reported
	// it: pre-ddl, ddl or done. A run that ended at ddl (not done) gated its
	// instance until a person verified its schema.
	// +optional
	Phase string `json:"phase,omitempty"`

	// LeaseEnd is how the operation's migration lease ended: released,
	// revoked, expired, or unknown. Empty while it runs.
	// +optional
	LeaseEnd LeaseEnd `json:"leaseEnd,omitempty"`

	// StartTime is the grant that began the run; EndTime its release,
	// revocation or expiry.
	// +optional
	StartTime *metav1.MicroTime `json:"startTime,omitempty"`
	// +optional
	EndTime *metav1.MicroTime `json:"endTime,omitempty"`

	// RevocationReason, for a revoked run: topology_changed or
	// operator_revoked.
	// +optional
	RevocationReason string `json:"revocationReason,omitempty"`

	// RevokedAtGeneration, for a revoked run: the topology generation of
	// the group's last move when it was revoked. For topology_changed, the
	// generation the move wrote (spec.grantGeneration is the one it was
	// granted at).
	// +optional
	RevokedAtGeneration int64 `json:"revokedAtGeneration,omitempty"`

	// ObservedGeneration is the metadata.generation this status was
	// written for (the spec never changes, so it is the run's first).
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions are the standard ones GitOps tools gate on (kstatus, read
	// by Flux and kubectl wait; Argo CD through the health check in
	// docs/gitops.md), projected from the outcome: Reconciling is True
	// while the run holds the mutex; Ready is True once it succeeded (or
	// released the mutex without reporting an outcome); Stalled is True,
	// with the outcome as its reason, once it failed, lost its authority,
	// expired or ended in an unknown way.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Condition types of a DeployRun (kstatus's).
const (
	DeployRunReady       = "Ready"
	DeployRunReconciling = "Reconciling"
	DeployRunStalled     = "Stalled"
)

// DeployRun records one granted migration operation: who ran it, at which
// topology generation, how far it got and how it ended. Created, changed and
// deleted by the operator only (the garbage collector aside, through the
// group's ownerReference); at most spec.deployRunHistory of a group's
// MysqlFailoverGroup are kept per instance.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=drun,categories=bloodraven
// +kubebuilder:printcolumn:name="Instance",type=string,JSONPath=`.spec.instance`
// +kubebuilder:printcolumn:name="Operation",type=string,JSONPath=`.spec.operationId`
// +kubebuilder:printcolumn:name="Outcome",type=string,JSONPath=`.status.outcome`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Generation",type=integer,JSONPath=`.spec.grantGeneration`
// +kubebuilder:printcolumn:name="Revoked-At",type=integer,JSONPath=`.status.revokedAtGeneration`,priority=1
// +kubebuilder:printcolumn:name="Caller",type=string,JSONPath=`.spec.caller`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DeployRun struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   DeployRunSpec   `json:"spec"`
	Status DeployRunStatus `json:"status,omitempty"`
}

// DeployRunList is a list of DeployRun.
//
// +kubebuilder:object:root=true
type DeployRunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []DeployRun `json:"items"`
}

func init() {
	SchemeBuilder.Register(&DeployRun{}, &DeployRunList{})
}
