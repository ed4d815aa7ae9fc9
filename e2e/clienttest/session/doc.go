// Package session tests deployclient's Session against the real operator
// (package operatortest: the controller and the deployment API over TLS,
// against envtest, with real TokenRequest tokens). It holds tests only; they
// live in the operator's module because the client's module imports no
// Kubernetes package.
package session
