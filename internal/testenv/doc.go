// Package testenv starts a real control plane (kube-apiserver + etcd built by
// `make tools` into ./bin) through controller-runtime's envtest, with the
// project's generated CRDs installed, for tests of anything that touches the
// Kubernetes API.
//
// Guarantees: the API server is real (admission, validation, resourceVersion
// conflicts, status subresources, TokenRequest and TokenReview all behave as in
// a cluster); CRDs come from config/crd, the generated files; a missing binary
// is a test failure with the command to run, never a skip.
//
// Not provided: controllers, garbage collection or any other kube-controller-
// manager loop. Owner references are recorded but nothing deletes dependents.
package testenv
