// Package e2e holds end-to-end tests that run the operator binary as a
// separate process against a real control plane and real MariaDB sites, the
// way `make dev` does (package devenv), over the real TLS listener. Run
// only them with `make e2e`; `make test` runs them too.
//
// Scenarios (each asserts outcomes: statuses, events, rows, counts):
//   - the playground comes up as the README documents, and every answer
//     under /deploy/ on its TLS port is JSON;
//   - the deployment API across a graceful leader change, and across a
//     SIGKILL of the leader with a follower running (handover measured);
//   - a failover-hold survives an operator crash: the restarted operator
//     still defers a planned failover until the hold's unrenewed TTL;
//   - the leading operator killed mid-grant, three times: a retried grant
//     gets 200/201 and exactly one holder remains;
//   - mutex histories of four clients across a leader SIGKILL, checked
//     linearizable (porcupine) against the contract's sequential model;
//   - emergency failover of real MariaDB, also while every deployment-Lease
//     update is denied, and during `bloodraven deploy run` (exit 5,
//     DeploymentLeaseRevoked).
//
// Guarantees: free loopback ports and a temporary state directory per test,
// so they run beside a developer's own `make dev`.
//
// Not yet covered (issue 14): API-server and etcd outages, hostile input
// over the wire, the soak of 20 clients.
package e2e
