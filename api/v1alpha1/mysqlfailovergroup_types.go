package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Site is one location of the failover group, for example iad or pdx.
type Site struct {
	// Name of the site. Required; unique within the group.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Host is the MySQL endpoint of the site for the topology driver.
	// Optional; empty means the site has no reachable endpoint configured and
	// the group cannot report a confirmed primary there.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Host string `json:"host,omitempty"`

	// Port is the MySQL port of the site. Default 3306.
	// +optional
	// +kubebuilder:default=3306
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// SecretReference names a Secret in the same namespace.
type SecretReference struct {
	// Name of the Secret. Required.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// DatabaseTLSMode says whether the operator's connections to a group's sites
// use TLS.
// +kubebuilder:validation:Enum=Required;Disabled
type DatabaseTLSMode string

// Modes of spec.tls.
const (
	// DatabaseTLSRequired: every connection is TLS, the server's
	// certificate must chain to the group's CA and name the site's host,
	// and a server that does not offer TLS is refused.
	DatabaseTLSRequired DatabaseTLSMode = "Required"
	// DatabaseTLSDisabled: plaintext connections, as without spec.tls.
	DatabaseTLSDisabled DatabaseTLSMode = "Disabled"
)

// DatabaseTLS is how the operator's MySQL topology driver connects to a
// group's sites.
// +kubebuilder:validation:XValidation:rule="self.mode != 'Required' || has(self.caSecretRef)",message="spec.tls.caSecretRef is required when spec.tls.mode is Required"
type DatabaseTLS struct {
	// Mode is Required (default) or Disabled. Required has no unverified
	// form: the server's certificate is always checked against the CA and
	// the site's host.
	// +optional
	// +kubebuilder:default=Required
	Mode DatabaseTLSMode `json:"mode,omitempty"`

	// CASecretRef names a Secret in the group's namespace whose key ca.crt
	// holds the PEM certificates the sites' server certificates must chain
	// to (a cert-manager Certificate's Secret has it). Required when mode is
	// Required.
	// +optional
	CASecretRef *SecretReference `json:"caSecretRef,omitempty"`

	// ClientCertificateSecretRef names a Secret in the group's namespace
	// with keys tls.crt and tls.key (a kubernetes.io/tls Secret): the
	// certificate the driver presents, for accounts created with REQUIRE
	// X509 or REQUIRE SUBJECT. Optional; it may name the same Secret as
	// caSecretRef.
	// +optional
	ClientCertificateSecretRef *SecretReference `json:"clientCertificateSecretRef,omitempty"`
}

// PlannedFailoverRequest asks for a planned switchover to TargetSite. A new ID
// is a new request; re-applying the same ID changes nothing.
type PlannedFailoverRequest struct {
	// ID identifies the request. Required.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	ID string `json:"id"`

	// TargetSite is the site to promote. Required; must name one of
	// spec.sites.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	TargetSite string `json:"targetSite"`
}

// RestoreInPlaceRequest asks for a restore of the group's data in place,
// followed by a promotion. A new ID is a new request.
type RestoreInPlaceRequest struct {
	// ID identifies the request. Required.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	ID string `json:"id"`

	// TargetSite is the site promoted once the restore completes. Optional;
	// default: the current active site.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	TargetSite string `json:"targetSite,omitempty"`
}

// MysqlFailoverGroupSpec declares the sites of a group and the planned
// operations requested on it.
type MysqlFailoverGroupSpec struct {
	// Sites of the group. Required; at least one, names unique.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	Sites []Site `json:"sites"`

	// PlannedFailover requests a planned switchover. Optional; default none.
	// +optional
	PlannedFailover *PlannedFailoverRequest `json:"plannedFailover,omitempty"`

	// UpdateRevision changes to request an ordered update. Optional; default
	// empty (no update requested).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	UpdateRevision string `json:"updateRevision,omitempty"`

	// RestoreInPlace requests a restore-in-place. Optional; default none.
	// +optional
	RestoreInPlace *RestoreInPlaceRequest `json:"restoreInPlace,omitempty"`

	// CredentialsSecretRef names a Secret in the group's namespace with keys
	// username and password: the account the MySQL topology driver uses on
	// every site (it needs SUPER/READ_ONLY ADMIN, REPLICATION SLAVE ADMIN and
	// the right to create the bloodraven.fence table). Optional; required by
	// --topology-driver=mysql.
	// +optional
	CredentialsSecretRef *SecretReference `json:"credentialsSecretRef,omitempty"`

	// TLS is how the MySQL topology driver connects to the sites. Optional;
	// absent: plaintext. The driver reads the Secrets it names with the
	// account's, and reads them again after a site refuses the certificate
	// or the account.
	// +optional
	TLS *DatabaseTLS `json:"tls,omitempty"`

	// FailureDetectionSeconds is the detection budget of emergency failover:
	// how long the primary must be unreachable before the operator promotes
	// another site. Default 30. Deployment leases never change it.
	// +optional
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=5
	// +kubebuilder:validation:Maximum=3600
	FailureDetectionSeconds int32 `json:"failureDetectionSeconds,omitempty"`

	// MaxDeferralSeconds bounds how long failover-holds may defer one
	// planned-operation request, counted from its first deferral. When it
	// is spent every live hold is revoked (reason deferral_budget_exhausted),
	// new hold grants are refused until the operation has run, and the
	// operation proceeds. Optional; absent: holds defer for as long as they
	// live. Emergency failover never reads it.
	// +optional
	// +kubebuilder:validation:Minimum=60
	// +kubebuilder:validation:Maximum=604800
	MaxDeferralSeconds *int32 `json:"maxDeferralSeconds,omitempty"`

	// DeployRunHistory is how many DeployRun records the operator keeps per
	// instance: past it, the oldest ended runs are deleted. A run still
	// holding the mutex is never deleted. Default 20.
	// +optional
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	DeployRunHistory int32 `json:"deployRunHistory,omitempty"`
}

// PlannedFailoverPhase is the phase of a planned failover.
// +kubebuilder:validation:Enum="";Admitting;Deferred;Promoting;Completed;Failed
type PlannedFailoverPhase string

// Phases of a planned failover.
const (
	PlannedFailoverPhaseNone      PlannedFailoverPhase = ""
	PlannedFailoverPhaseAdmitting PlannedFailoverPhase = "Admitting"
	PlannedFailoverPhaseDeferred  PlannedFailoverPhase = "Deferred"
	PlannedFailoverPhasePromoting PlannedFailoverPhase = "Promoting"
	PlannedFailoverPhaseCompleted PlannedFailoverPhase = "Completed"
	PlannedFailoverPhaseFailed    PlannedFailoverPhase = "Failed"
)

// OperationPhase is the phase of an ordered update, a restore-in-place or a
// Dragonfly upgrade. Empty means none has run.
// +kubebuilder:validation:Enum="";Admitting;Deferred;UpdatingReplicas;FailingOver;UpdatingFormerPrimary;Restoring;Promoting;Completed;Failed
type OperationPhase string

// Phases of ordered updates and restores-in-place.
const (
	PhaseNone                  OperationPhase = ""
	PhaseAdmitting             OperationPhase = "Admitting"
	PhaseDeferred              OperationPhase = "Deferred"
	PhaseUpdatingReplicas      OperationPhase = "UpdatingReplicas"
	PhaseFailingOver           OperationPhase = "FailingOver"
	PhaseUpdatingFormerPrimary OperationPhase = "UpdatingFormerPrimary"
	PhaseRestoring             OperationPhase = "Restoring"
	PhasePromoting             OperationPhase = "Promoting"
	PhaseCompleted             OperationPhase = "Completed"
	PhaseFailed                OperationPhase = "Failed"
)

// Active tells whether the phase is in flight (neither empty nor terminal).
func (p OperationPhase) Active() bool {
	return p != PhaseNone && p != PhaseCompleted && p != PhaseFailed
}

// DeferReasonDeploymentHold is the reason a planned operation waits behind a
// live failover-hold deployment lease.
const DeferReasonDeploymentHold = "DeploymentHold"

// Condition types of a MysqlFailoverGroup.
const (
	ConditionReady                 = "Ready"
	ConditionDegraded              = "Degraded"
	ConditionSplitBrain            = "SplitBrain"
	ConditionNoPrimary             = "NoPrimary"
	ConditionAutomaticFailoverHeld = "AutomaticFailoverHeld"
)

// Admission records why a planned operation has not started yet.
type Admission struct {
	// DeferReason is why the operation waits, for example DeploymentHold.
	// +optional
	DeferReason string `json:"deferReason,omitempty"`

	// RetryTime is the earliest time the operation is re-admitted: for a
	// deployment hold, the earliest expiry of the live holds, exactly as the
	// deployment API reports the hold's expiresAt (microsecond precision). It
	// moves with every hold renewal.
	// +optional
	RetryTime *metav1.MicroTime `json:"retryTime,omitempty"`

	// Message names what blocks the operation, for example the operationId
	// and instance of the blocking hold.
	// +optional
	Message string `json:"message,omitempty"`

	// BudgetExhaustsAt is when the request's deferral budget
	// (spec.maxDeferralSeconds) is spent: live holds are then revoked and
	// the operation proceeds. Set while the budget runs; a pipeline checks
	// it (GET /deploy/v1/groups/{group}) before it starts DDL.
	// +optional
	BudgetExhaustsAt *metav1.MicroTime `json:"budgetExhaustsAt,omitempty"`
}

// DeferralBudget is the deferral budget of one planned-operation request
// (spec.maxDeferralSeconds), from its first deferral by a hold until the
// operation has run or its request is gone.
type DeferralBudget struct {
	// Operation is the planned operation: PlannedFailover, OrderedUpdate or
	// RestoreInPlace.
	Operation OperationName `json:"operation"`
	// ID of the request (spec.plannedFailover.id, spec.updateRevision,
	// spec.restoreInPlace.id).
	ID string `json:"id"`
	// FirstDeferredAt is when a hold first deferred the request: the budget
	// runs from here, whether or not the request is deferred at every
	// moment after.
	FirstDeferredAt metav1.MicroTime `json:"firstDeferredAt"`
	// ExhaustsAt is FirstDeferredAt plus spec.maxDeferralSeconds as it was
	// when last decided.
	ExhaustsAt metav1.MicroTime `json:"exhaustsAt"`
	// Warned: Event DeferralBudgetWarning was emitted (at half the budget).
	// +optional
	Warned bool `json:"warned,omitempty"`
	// Exhausted: the budget is spent, Event DeferralBudgetExhausted was
	// emitted; live holds are revoked and new hold grants refused (409
	// deferral_budget_exhausted) until the operation has run.
	// +optional
	Exhausted bool `json:"exhausted,omitempty"`
}

// PlannedFailoverStatus is the progress of the current planned failover.
type PlannedFailoverStatus struct {
	// ID of the request this status belongs to.
	// +optional
	ID string `json:"id,omitempty"`

	// TargetSite of the request.
	// +optional
	TargetSite string `json:"targetSite,omitempty"`

	// Phase of the request.
	// +optional
	Phase PlannedFailoverPhase `json:"phase,omitempty"`

	// Reason of the current phase, for example DeploymentHold.
	// +optional
	Reason string `json:"reason,omitempty"`

	// Admission explains a deferral.
	// +optional
	Admission *Admission `json:"admission,omitempty"`
}

// Health is what the last probe of the sites observed.
type Health struct {
	// Ready is true when a confirmed primary accepts writes.
	Ready bool `json:"ready"`

	// DegradedReason is empty when the group is not degraded.
	// +optional
	DegradedReason string `json:"degradedReason,omitempty"`

	// ReplicationRunning is true when every replica's replication threads run.
	ReplicationRunning bool `json:"replicationRunning"`

	// ReplicationLagSeconds is the largest replica lag observed.
	// +optional
	ReplicationLagSeconds float64 `json:"replicationLagSeconds,omitempty"`

	// RecoveryPending is true while a returning site waits to be fenced or
	// re-pointed.
	RecoveryPending bool `json:"recoveryPending"`
}

// TopologyTransition marks an authoritative change of active site that the
// operator has started and not yet confirmed. While it is present the
// deployment API answers grants and renewals with 423 unstable: the fence is
// about to move and no lease may be extended across it.
type TopologyTransition struct {
	// Operation that moves the primary: Bootstrap, PlannedFailover,
	// EmergencyFailover, OrderedUpdate or RestoreInPlace.
	Operation OperationName `json:"operation"`

	// TargetSite is the site being promoted.
	TargetSite string `json:"targetSite"`

	// Generation is the topologyGeneration the change will install (the
	// current one plus one).
	Generation int64 `json:"generation"`

	// StartedAt is when the operator marked the transition.
	StartedAt metav1.Time `json:"startedAt"`

	// Failures counts the promotion attempts that failed against a
	// reachable target. After a few failures spanning the operator's promote
	// timeout the transition is rolled back: its target is fenced read-only
	// before any other site is made writable again.
	// +optional
	Failures int32 `json:"failures,omitempty"`

	// LastError is the error of the last failed promotion attempt.
	// +optional
	LastError string `json:"lastError,omitempty"`

	// FailingSince is when the current run of failed attempts began. It is
	// cleared, with Failures, while the target is unreachable: a target that
	// comes back gets the full promote timeout again.
	// +optional
	FailingSince *metav1.Time `json:"failingSince,omitempty"`
}

// OperationReservation is written by the operator after a planned operation
// passed admission and before it acts. While it stands the deployment API
// answers failover-hold grants and renewals with 423 unstable, and the
// operator re-checks holds after writing it, so a hold and an admission can
// never both proceed.
type OperationReservation struct {
	// Operation reserved: PlannedFailover, OrderedUpdate or RestoreInPlace.
	Operation OperationName `json:"operation"`

	// ID of the request (spec.plannedFailover.id, the update revision, or
	// spec.restoreInPlace.id).
	ID string `json:"id"`

	// ReservedAt is when the reservation was written.
	ReservedAt metav1.Time `json:"reservedAt"`
}

// MysqlFailoverGroupStatus is written only by the operator.
type MysqlFailoverGroupStatus struct {
	// ObservedGeneration is the metadata.generation last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// ActiveSite is the site of the confirmed primary; empty before bootstrap.
	// +optional
	ActiveSite string `json:"activeSite,omitempty"`

	// TopologyGeneration is the durable fence: it increments by exactly one on
	// every authoritative change of active site (planned promotion, emergency
	// failover, the failover inside an ordered update, restore-in-place
	// promotion, bootstrap completion) and never decreases. 0 before
	// bootstrap. Every deployment lease is stamped with it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TopologyGeneration int64 `json:"topologyGeneration,omitempty"`

	// TopologyGenerationTime is when the operator wrote the current
	// topologyGeneration: the moment the topology moved. A deployment lease
	// granted under an older generation that was still live at this time is
	// revoked (topology_changed), however it ended afterwards; one released
	// or expired before it is not. Absent for a group whose last move
	// predates this field.
	// +optional
	TopologyGenerationTime *metav1.MicroTime `json:"topologyGenerationTime,omitempty"`

	// Transition is present while an active-site change is unconfirmed.
	// +optional
	Transition *TopologyTransition `json:"transition,omitempty"`

	// Reservation is present while an admitted planned operation runs.
	// +optional
	Reservation *OperationReservation `json:"reservation,omitempty"`

	// DeferralBudgets are the running deferral budgets, one per planned
	// operation whose request a hold deferred (spec.maxDeferralSeconds set).
	// +optional
	// +listType=map
	// +listMapKey=operation
	DeferralBudgets []DeferralBudget `json:"deferralBudgets,omitempty"`

	// Health is the last probe's observation.
	// +optional
	Health Health `json:"health,omitempty"`

	// PrimaryLostAt is when the operator first saw the active site
	// unreachable; emergency failover starts failureDetectionSeconds later.
	// Cleared when the primary answers again.
	// +optional
	PrimaryLostAt *metav1.Time `json:"primaryLostAt,omitempty"`

	// UpdatedRevision is the spec.updateRevision the last ordered update
	// completed.
	// +optional
	UpdatedRevision string `json:"updatedRevision,omitempty"`

	// RestoreInPlaceID is the spec.restoreInPlace.id the current or last
	// restore-in-place belongs to.
	// +optional
	RestoreInPlaceID string `json:"restoreInPlaceID,omitempty"`

	// PlannedFailover is the progress of spec.plannedFailover.
	// +optional
	PlannedFailover *PlannedFailoverStatus `json:"plannedFailover,omitempty"`

	// UpdatePhase is the phase of the ordered update; empty when none runs.
	// +optional
	UpdatePhase OperationPhase `json:"updatePhase,omitempty"`

	// RestoreInPlace is the phase of the restore-in-place; empty when none
	// runs.
	// +optional
	RestoreInPlace OperationPhase `json:"restoreInPlace,omitempty"`

	// DragonflyUpgrade is the phase of a Dragonfly (cache tier) upgrade;
	// empty when none runs. The operator's Dragonfly upgrade controller owns
	// it, which is not part of this component: Bloodraven never writes it,
	// and reports it (GET operations.dragonflyUpgrade; an active phase makes
	// stable false).
	// +optional
	DragonflyUpgrade OperationPhase `json:"dragonflyUpgrade,omitempty"`

	// Conditions: Ready, Degraded, SplitBrain, NoPrimary,
	// AutomaticFailoverHeld.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MysqlFailoverGroup is a MySQL primary with replicas across sites, with the
// durable topology generation that fences deployment leases.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mfg;mysqlfg,categories=bloodraven
// +kubebuilder:printcolumn:name="Active",type=string,JSONPath=`.status.activeSite`
// +kubebuilder:printcolumn:name="Generation",type=integer,JSONPath=`.status.topologyGeneration`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Failover",type=string,JSONPath=`.status.plannedFailover.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MysqlFailoverGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MysqlFailoverGroupSpec   `json:"spec"`
	Status MysqlFailoverGroupStatus `json:"status,omitempty"`
}

// MysqlFailoverGroupList is a list of MysqlFailoverGroup.
//
// +kubebuilder:object:root=true
type MysqlFailoverGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MysqlFailoverGroup `json:"items"`
}

func init() {
	SchemeBuilder.Register(&MysqlFailoverGroup{}, &MysqlFailoverGroupList{})
}
