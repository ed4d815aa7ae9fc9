// Package mysql is the production topology driver: it speaks SQL to each
// site's MySQL or MariaDB server (github.com/go-sql-driver/mysql), choosing
// the dialect from the server's version string.
//
// Steps:
//   - Probe: reachability, read_only (and super_read_only on MySQL), the
//     replication threads, lag, and the executed GTID set.
//   - Planned promotion: make the old primary read-only, read its GTID set,
//     wait (bounded) until the target has applied it, stop and reset
//     replication on the target, write the fence table, make the target
//     writable, and point the old primary and every other replica at it.
//     Nothing acknowledged on the old primary is lost: it stops accepting
//     writes before its position is read, and the target is writable only
//     after it has applied that position.
//   - Emergency promotion: the old primary is gone; the target applies what
//     it already received (bounded by WaitTimeout) before its replication is
//     stopped and reset, which discards the relay log: the GTIDs of the
//     dialect's received column of SHOW REPLICA STATUS, waited for with the
//     dialect's wait function (MariaDB: Gtid_IO_Pos and MASTER_GTID_WAIT;
//     MySQL 8: Retrieved_Gtid_Set and WAIT_FOR_EXECUTED_GTID_SET). Then the
//     same fence-and-open steps; other reachable replicas are pointed at it.
//   - Fence: read-only, nothing else. Rejoin (after fencing) points a fenced
//     site at the primary and checks the replica's IO thread: a server with
//     errant transactions (GTIDs the new primary never had) is refused by
//     the primary; the driver then stops replication, leaves it fenced, and
//     returns ErrErrantTransactions. It waits up to 5 s for the threads,
//     measured and slept on the driver's Clock, and returns its context's
//     error (wrapped: errors.Is context.Canceled or DeadlineExceeded) as
//     soon as its context ends.
//   - The fence in the database: bloodraven.fence holds the topology
//     generation and active site, written on the new primary before it
//     accepts writes (see FenceQuery). The write never lowers the
//     generation nor changes the site of one already recorded; the
//     promotion reads it back and opens nothing over a newer move's row, on
//     the target or on any reachable site (ErrNewerFence). UndoTransition
//     puts the confirmed row back where a rolled-back transition wrote its
//     own.
//   - Leadership: Promote, FenceOthers and Rejoin confirm that the operator
//     still leads (topology.ConfirmLeading) before they open, re-point or
//     fence a site, and run within the leadership confirmed
//     (topology.ErrNotLeading otherwise, never an UnreachableError).
//
// Every call has short timeouts (connect 2 s, read/write 10 s; GTID waits
// are bounded by WaitTimeout). The driver's own waits read Driver.Clock
// (clock.RealClock when nil; NewCached sets the operator's clock).
//
// TLS: when the group's spec.tls requires it, every connection is TLS 1.2+
// verified against the group's CA and the site's host, optionally with a
// client certificate; a server that offers no TLS, another CA's certificate
// or one for another name is refused before any statement is sent, and the
// group's Secrets are read again on the next call (FromSecrets reads them;
// CredentialCache keeps them). Replication the driver points uses TLS too
// (MASTER_SSL=1 / SOURCE_SSL=1); whether a replica verifies its source is
// the server's own setting. Without spec.tls connections are plaintext.
//
// MariaDB is tested against real servers, with and without TLS; the MySQL 8
// dialect only by SQL-level unit tests (statements recorded by a
// database/sql test driver).
package mysql
