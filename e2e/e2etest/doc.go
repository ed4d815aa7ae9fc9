// Package e2etest holds what the end-to-end packages (e2e, e2e/soak)
// share: a playground per test on free ports (the operator binary built
// from the checkout), polling, and reading the operator's metrics.
//
// Guarantees: every playground is stopped when its test ends, and its
// operator log and MariaDB logs are printed when the test failed.
package e2etest
