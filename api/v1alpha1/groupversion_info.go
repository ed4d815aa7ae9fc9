package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "bloodraven.shipstream.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = &schemeBuilder{}

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// schemeBuilder collects the package's types. It is apimachinery only, not
// controller-runtime's scheme.Builder, so that pure packages (policy) can
// use these types without linking a client.
type schemeBuilder struct{ objects []runtime.Object }

// Register adds objects to the types the builder registers.
func (b *schemeBuilder) Register(objects ...runtime.Object) {
	b.objects = append(b.objects, objects...)
}

// AddToScheme registers the types with s.
func (b *schemeBuilder) AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, b.objects...)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// RevokeDeploymentLeasesAnnotation, set on a MysqlFailoverGroup with any
// value, asks the operator to revoke every live deployment lease of the group
// with reason operator_revoked. The operator removes it when done.
const RevokeDeploymentLeasesAnnotation = "bloodraven.shipstream.io/revoke-deployment-leases"

// SchemaVerifiedAnnotation, set on a MysqlDatabase to the operationId of
// its status.pendingVerification, says a person checked the schema that
// operation may have half-applied: the operator opens the gate (clears the
// condition SchemaVerificationRequired and the pending operation), removes
// the annotation and emits SchemaVerified. Whoever may edit the database
// may verify.
const SchemaVerifiedAnnotation = "bloodraven.shipstream.io/schema-verified"
