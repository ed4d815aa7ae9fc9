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
//   - mutex histories of four clients across a leader SIGKILL, a 10 s
//     kube-apiserver outage (SIGKILL, then a restart) and an etcd restart,
//     each checked linearizable (porcupine) against the contract's
//     sequential model, in which an answer without a verdict (5xx, none)
//     may or may not have taken effect;
//   - the API-server outage: every answer while it is down is JSON 503
//     (`unavailable`), service resumes by itself, a `deploy run` with a
//     5 s ttl stops its command by its confirmed deadline (exit 4);
//   - the etcd restart: a revoked operation stays revoked, one holder after;
//   - emergency failover of real MariaDB, also while every deployment-Lease
//     update is denied, during `bloodraven deploy run` (exit 5,
//     DeploymentLeaseRevoked), and with the webhooks black-holed behind a
//     fault proxy (promoted within the 5-s budget + 10 s, while a person's
//     status edit fails closed);
//   - partial failure of the primary (iad) behind a fault proxy
//     (internal/faultproxy) or paused with SIGSTOP: a planned failover
//     requested while iad is paused, black-holed or refusing connections
//     waits in Admitting/SiteUnreachable naming iad, writes no transition
//     and opens no site, then completes once iad is back, with no sample
//     of two writable sites (readonly.Sampler) from the request to
//     the completion; and with a 5 s detection budget the emergency path
//     promotes pdx past such a pending planned failover (black-holed and
//     paused iad), fences the returning iad within about one probe
//     interval, and the planned failover ends AlreadyActive;
//   - a planned move that loses its old primary mid-promotion (issue 35):
//     iad's proxy slows the promotion, iad is paused (SIGSTOP) once the
//     planned transition is persisted; the transition is rolled back at
//     once (pdx fenced, the planned failover back in Admitting), the
//     emergency path promotes pdx within failureDetectionSeconds + 10 s
//     of the pause, the planned failover ends AlreadyActive, and no
//     sample (every 100 ms) shows two writable sites;
//   - a deposed leader (issue 35): two operator processes, the leader
//     paused (SIGSTOP) mid-promotion until the follower has completed
//     that move and a second one back to iad, then resumed: @@read_only
//     sampled every 10 ms shows at most one writable site, pdx is never
//     opened nor re-pointed away from iad, and the old leader's process
//     ends (leader election lost) and comes back a follower (503
//     not_leader);
//   - hostile input over the wire: a table of malformed, oversized,
//     wrong-method, wrong-content-type, traversal and header-bomb requests,
//     a slow body, 1,000 idle TLS connections and TLS 1.0/1.1 handshakes;
//     no panic, no change, goroutines and fds back to their count;
//   - an authorized tenant's flood (issue 35): one ServiceAccount with its
//     own legitimate group GETs it at ~385/s over HTTP/2 from 16
//     connections (e2e/e2etest/authflood, its own non-race process) while
//     a victim renews every 100 ms and runs `deploy run`: no renewal of the
//     victim fails, the run exits 0, the flood is answered only 200 or 429,
//     and the victim's p99 under the flood stays within 2x its quiet p99;
//   - verification covers one tenure (issue 35): a verified operation id
//     re-run past `mark-ddl` and killed -9 again gates the instance again;
//   - online schema changes (issue 40) with the real
//     pt-online-schema-change and the recipe in examples/online-schema-change:
//     iad's host lost mid-copy (the tool's path black-holed by a fault proxy,
//     mariadbd killed): the run exits 4 at stage pre-ddl, no gate, the table
//     unchanged on pdx, the leftovers stay until the next run drops the
//     triggers, then the shadow table, and cuts over; a planned failover
//     requested mid-copy keeps the cut-over waiting (PlannedOperationPending)
//     until the deferral budget ends the hold (exit 4 at awaiting-cut-over),
//     and the next run cuts over once it is safe: the schema changed exactly
//     once. Rows written throughout, none lost or duplicated; @@read_only
//     sampled every 100 ms. gh-ost's postpone file with a stand-in for
//     gh-ost (e2e/testdata/gh-ost-standin): the file stays while a planned
//     failover is pending and goes once it is withdrawn;
//   - the soak (package e2e/soak): 20 `deploy run` clients, each with its
//     own group, renewing for 80 s in `make test` and 5 minutes in
//     `make soak`: every run succeeds, no 5xx, no refused renewal, the
//     operator's heap stays flat (skipped with -short).
//
// Phases: the two tests that compare latencies (the hostile tenant's and
// the authorized flood's, each a victim's quiet p99 against its p99 under
// attack, in the same run) are sequential: Go runs them first, alone, and
// their floods run under SCHED_IDLE (chrt before the exec, so every thread
// of the flood has it), so the victim's latency measures what the operator
// pays to answer a flood, not the flood's own TLS work on the same two
// cores (on a cluster the attacker's CPU is not the operator's). Every
// other test calls t.Parallel() first and runs after them, E2E_PARALLEL
// (3, the Makefile's -parallel) at a time: they wait on timers (ttls,
// detection budgets, the leader-election lease) far more than they compute,
// and each has its own playground, so they share nothing but the CPUs. A
// time bound of theirs is a budget plus a margin, never a ratio.
//
// Guarantees: free loopback ports and a temporary state directory per test,
// so they run beside a developer's own `make dev` and beside each other; a
// test binary that panics takes its control plane, sites and operators
// with it.
//
// Not covered: a real network partition between the operator and the
// sites (the sites run on loopback; the fault proxies simulate one between
// the operator and a site, while the sites' own replication stays direct
// until a promotion re-points it at the proxies), and more than one node.
package e2e
