// Package binary checks what a pipeline installs: the deployclient package
// imports only the standard library, and bloodraven-deploy cross-compiles
// for linux and darwin (amd64, arm64) as a static binary that links no
// Kubernetes package. It holds tests only.
package binary
