package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GroupReference names a MysqlFailoverGroup in the same namespace.
type GroupReference struct {
	// Name of the MysqlFailoverGroup, in the MysqlDatabase's namespace.
	// Required; no default.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// DeploymentClient is one (namespace, ServiceAccount) pair allowed to use the
// deployment API for the database's group.
type DeploymentClient struct {
	// Namespace of the calling ServiceAccount. Required; no default. The list
	// is keyed by this field: at most one ServiceAccount per namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`

	// ServiceAccount is the name of the calling ServiceAccount. Required; no
	// default.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ServiceAccount string `json:"serviceAccount"`
}

// MysqlDatabaseSpec declares one application database of a failover group and
// who may coordinate deployments for it.
type MysqlDatabaseSpec struct {
	// GroupRef names the MysqlFailoverGroup this database lives in, in the same
	// namespace. Required; immutable.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="groupRef is immutable: create a new MysqlDatabase for another group"
	GroupRef GroupReference `json:"groupRef"`

	// DatabaseName is the SQL schema name. Required. It is not the deployment
	// lease identity: the lease's instance is this resource's metadata.name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	DatabaseName string `json:"databaseName"`

	// DeploymentClients lists the ServiceAccounts allowed to call the
	// deployment API (/deploy/v1) for this database's group, one per
	// namespace. Optional; default empty, which allows no caller.
	// +optional
	// +listType=map
	// +listMapKey=namespace
	// +kubebuilder:validation:MaxItems=64
	DeploymentClients []DeploymentClient `json:"deploymentClients,omitempty"`
}

// MysqlDatabaseStatus is written by the operator.
type MysqlDatabaseStatus struct {
	// ObservedGeneration is the metadata.generation last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions describe the database's state: GroupFound (spec.groupRef
	// names an existing group), DeploymentClients (at least one
	// ServiceAccount may call the deployment API for it) and, once a
	// migration of it lost authority past its DDL boundary,
	// SchemaVerificationRequired.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// PendingVerification names the migration operation that ended (revoked,
	// expired or released) after it reported its DDL boundary ("ddl") and
	// before it confirmed its end ("done"). While it is set, every new
	// migration grant for this database answers 409 verification_required.
	// A person clears it by setting the annotation
	// bloodraven.shipstream.io/schema-verified=<operationId>.
	// +optional
	PendingVerification *SchemaVerification `json:"pendingVerification,omitempty"`

	// LastVerifiedOperationID is the operation a person last verified: the
	// ended record of its verified tenure (LastVerifiedTenureStart) no
	// longer gates this database. A later tenure of the same operation id
	// that ends past its DDL boundary closes the gate again.
	// +optional
	LastVerifiedOperationID string `json:"lastVerifiedOperationId,omitempty"`

	// LastVerifiedTenureStart is when the verified tenure of
	// LastVerifiedOperationID began (its grant). Unset on a status written
	// before this field existed: the verification then covers the
	// operation id's record as it stands.
	// +optional
	LastVerifiedTenureStart *metav1.MicroTime `json:"lastVerifiedTenureStart,omitempty"`
}

// SchemaVerification is a migration operation whose schema change may be
// half-applied.
type SchemaVerification struct {
	// OperationID of the migration.
	OperationID string `json:"operationId"`
	// TopologyGeneration the operation was granted under.
	TopologyGeneration int64 `json:"topologyGeneration"`
	// TenureStart is when the gated tenure of the operation began (its
	// grant): a verification covers this tenure only.
	// +optional
	TenureStart *metav1.MicroTime `json:"tenureStart,omitempty"`
	// Ended is how the operation's lease ended: revoked, expired or
	// released.
	Ended string `json:"ended"`
	// Reason of the revocation, when Ended is revoked.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Since is when the gate closed.
	Since metav1.Time `json:"since"`
	// Announced is true once Event SchemaVerificationRequired was emitted.
	// +optional
	Announced bool `json:"announced,omitempty"`
}

// MysqlDatabase is an application database inside a MysqlFailoverGroup. Its
// resource name is the deployment lease's instance.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mysqldb;mdb,categories=bloodraven
// +kubebuilder:selectablefield:JSONPath=`.spec.groupRef.name`
// +kubebuilder:printcolumn:name="Group",type=string,JSONPath=`.spec.groupRef.name`
// +kubebuilder:printcolumn:name="Database",type=string,JSONPath=`.spec.databaseName`
// +kubebuilder:printcolumn:name="Clients",type=string,JSONPath=`.spec.deploymentClients[*].namespace`,description="Namespaces with a deployment client"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MysqlDatabase struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MysqlDatabaseSpec   `json:"spec"`
	Status MysqlDatabaseStatus `json:"status,omitempty"`
}

// MysqlDatabaseList is a list of MysqlDatabase.
//
// +kubebuilder:object:root=true
type MysqlDatabaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MysqlDatabase `json:"items"`
}

func init() {
	SchemeBuilder.Register(&MysqlDatabase{}, &MysqlDatabaseList{})
}
