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
// The hot path of a renewal (docs/leases.md, "What one request costs"):
// RESTConfig asks the API server for uncompressed answers; CacheOptions
// keeps no managed fields; MapperProvider remembers the REST mappings of
// the project's kinds and the Lease, whose scope cannot change; the
// deployment API's uncached reads of groups and databases are GETs decoded
// straight into their types (directreader.go), with the API server's
// errors. These change what is spent, never what is read: every read the
// fence or the authorization needs is still a GET from the API server.
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
