// Package operator assembles the operator's running parts on one
// controller-runtime manager: the lease stores, the group controller with
// its background prober and its own API client, the database controller,
// and the deployment API. The binary (cmd/bloodraven) and the in-process harness
// (internal/operatortest) both call New, so a test runs the parts as they
// ship; only the driver, the clock, the log and the registries differ.
//
// Guarantees: every part reads the one clock of Config; the controller's
// lease store and the deployment API's share the record key, so a record
// one writes the other verifies; the controller's client has limiters of
// its own, so a burst of failovers never queues behind deploy requests.
//
// Not here: the manager itself (its cache scope, leader election,
// listeners), the TLS listener and the auxiliary server, and the lease
// guard check: the caller owns those, because a test harness replaces
// them.
//
// fleet_test.go runs the whole operator against real MariaDB pairs (a
// site lost under many groups): it lives here because it needs exactly
// this constructor and no binary.
package operator
