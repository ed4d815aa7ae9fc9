package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "bloodraven.shipstream.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// RevokeDeploymentLeasesAnnotation, set on a MysqlFailoverGroup with any
// value, asks the operator to revoke every live deployment lease of the group
// with reason operator_revoked. The operator removes it when done.
const RevokeDeploymentLeasesAnnotation = "bloodraven.shipstream.io/revoke-deployment-leases"
