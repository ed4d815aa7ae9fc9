// Package e2etest holds what the end-to-end packages (e2e, e2e/soak)
// share: a playground per test on free ports (the operator binary built
// from the checkout, or $BLOODRAVEN_E2E_OPERATOR when set: a binary built
// from a snapshot while the checkout is being edited), polling, reading the
// operator's metrics, sampling every site's read_only, and a stall watch
// (how late the test process wakes: a paused machine ends short leases
// correctly, and a test that loses one can say whether it was paused).
//
// Guarantees: every playground is stopped when its test ends, and its
// operator log and MariaDB logs are printed when the test failed.
package e2etest
