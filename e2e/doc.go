// Package e2e holds end-to-end tests that run the operator binary as a
// separate process against a real control plane, the way `make dev` does.
//
// Guarantees: what these tests check is what a user of the playground sees
// (the kubeconfig, CA, token and ports at their documented paths). They use
// free loopback ports and a temporary state directory, so they run beside a
// developer's own `make dev`.
package e2e
