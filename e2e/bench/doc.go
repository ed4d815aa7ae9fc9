// Package bench is the load generator behind `make bench`. Its one test,
// TestLoad, runs only with BLOODRAVEN_BENCH=1: it starts a real
// kube-apiserver and etcd (package testenv), the operator in the test
// process (package internal/operatortest: the group controller on the
// simulated topology driver and the deployment API over TLS), and measures,
// in one process against one control plane:
//
//   - throughput and latency of closed-loop lease renewals at 1, 8 and 32
//     concurrent clients, with and without thousands of unrelated
//     MysqlDatabases in the cluster, for three modes:
//     floor (the API-server work a renewal cannot avoid, done directly with
//     a controller-runtime client: GET the MysqlDatabase, GET the group, PUT
//     a Lease with the last resourceVersion), product (PUT renewals of the
//     migration lease through /deploy/v1 over HTTPS with real ServiceAccount
//     tokens) and peer (client-go leader election's renew fast path: one PUT
//     of a cached Lease);
//   - kube-apiserver requests per operation and TokenReviews per 1,000
//     deployment API requests, from the API server's apiserver_request_total;
//   - CPU milliseconds per operation of the test process (load generator and
//     operator), kube-apiserver and etcd, from /proc: where a mode's cost
//     goes, so that a ratio to the floor can be explained, not only read;
//   - how long after the API server acknowledges a topology generation bump
//     a renewal of a lease granted under the old one is refused (409
//     revoked) and its tombstone exists;
//   - the growth of the test process's heap (bench and in-process operator
//     together) per 10,000 tombstones.
//
// Each product worker connects from its own loopback address (127.0.0.2,
// .3, ...), as pipelines in their own Pods do: the API limits TokenReviews
// per source address, and 32 fresh tokens from one address would queue
// behind that limit (503 unavailable) instead of renewing.
//
// A renewal cell is Rounds interleaved rounds (BENCH_ROUNDS, default 5):
// each round runs one slice of every mode, in the order of the modes on
// even rounds and the reverse on odd ones, so a drift of the machine's
// speed weighs on every mode alike; a cell sums its mode's slices, and
// reports each slice's ratio to the floor slice of its round.
//
// BENCH_QUICK=1 shortens every cell; BENCH_SMOKE=1 (what `make test` runs)
// runs the smallest size of every table in under a minute, to prove that
// the load generator builds and runs; BENCH_OUT names the JSON report (see
// Report for its schema). BENCH_CLIENTS, BENCH_DATABASES and BENCH_MODES
// (comma-separated) narrow the renewal cells (BENCH_MODES also takes
// floor-meta: the floor renewing a deployment Lease in the product's format,
// through leasestore, to split a product cell's cost between the Lease's
// format and the deployment API) and BENCH_RENEWALS_ONLY=1
// skips the heap and revocation figures: for profiling a cell
// (go test -cpuprofile), never for a report. BENCH_APISERVER_PROFILE=dir
// writes kube-apiserver's CPU profile of every renewal slice (and of the
// site-loss failovers) into dir.
//
// Guarantees: every figure is measured, never estimated; the test fails when
// a figure cannot be produced (a cell without a successful operation, a
// failed /metrics scrape, a revocation not seen within its timeout).
//
// Not guaranteed: anything about speed. The test asserts no throughput,
// latency, cost or memory goal and no ratio to the floor; it reports. The
// numbers are those of one shared machine: the load generator, the operator
// and the control plane compete for the same CPUs, and API request counts
// include the operator's own background traffic (its controllers; watches
// are long-running requests and are not counted per event).
package bench
