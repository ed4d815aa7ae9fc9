// Package v1alpha1 holds the bloodraven.shipstream.io/v1alpha1 API: the
// MysqlFailoverGroup and MysqlDatabase custom resources.
//
// Guarantees:
//   - The CRD schemas and deepcopy functions are generated from these types
//     (`make generate`); `make check-generate` fails when they drift.
//   - Field validation that a structural schema can express (required fields,
//     names, enums, the one-client-per-namespace list-map) is enforced by the
//     API server itself, so it holds even when no webhook is running.
//
// Not guaranteed here:
//   - Cross-field and identity-dependent rules (who may change
//     status.topologyGeneration, targetSite naming a declared site) are the
//     validating webhooks' job (package webhook).
//   - Status fields are written only by the operator; nothing in the schema
//     alone prevents a cluster-admin from writing them.
//
// +kubebuilder:object:generate=true
// +groupName=bloodraven.shipstream.io
package v1alpha1
