package mysql

import (
	"fmt"
	"strconv"
	"strings"
)

// dialect is the SQL one server family speaks for the driver's steps.
type dialect struct {
	name string
	// readOnlyOn/Off make the server refuse (or accept) ordinary writes.
	readOnlyOn, readOnlyOff []string
	// readOnlyQuery returns one row: read_only (and super_read_only on MySQL).
	readOnlyQuery string
	// gtidExecuted returns the server's executed GTID set.
	gtidExecuted string
	// waitGTID(set, timeoutSeconds) returns 0 when the set is applied.
	waitGTID string
	// receivedGTID is the column of SHOW REPLICA STATUS that holds the
	// GTIDs the replica has received (written to its relay log), applied or
	// not: an emergency promotion waits (waitGTID) until they are applied
	// before it stops and resets replication, which discards the relay log.
	receivedGTID string
	// column names in SHOW REPLICA STATUS
	ioRunning, sqlRunning, lag, lastIOErrno string
	sourceHost, sourcePort                  string
	stopReplica, resetReplica, startReplica string
	// changeSource is a format: host, port, user, password.
	changeSource string
	// sourceSSL is appended to changeSource when the group requires TLS:
	// the replica's connection to its source is encrypted too.
	sourceSSL string
}

// mariaDB is MariaDB 10.5+ (tested against 10.11).
var mariaDB = dialect{
	name:          "mariadb",
	readOnlyOn:    []string{"SET GLOBAL read_only=ON"},
	readOnlyOff:   []string{"SET GLOBAL read_only=OFF"},
	readOnlyQuery: "SELECT @@global.read_only, 0",
	gtidExecuted:  "SELECT @@global.gtid_binlog_pos",
	waitGTID:      "SELECT MASTER_GTID_WAIT(?, ?)",
	receivedGTID:  "Gtid_IO_Pos",
	ioRunning:     "Slave_IO_Running", sqlRunning: "Slave_SQL_Running", lag: "Seconds_Behind_Master", lastIOErrno: "Last_IO_Errno",
	sourceHost: "Master_Host", sourcePort: "Master_Port",
	stopReplica:  "STOP SLAVE",
	resetReplica: "RESET SLAVE ALL",
	startReplica: "START SLAVE",
	changeSource: "CHANGE MASTER TO MASTER_HOST=%s, MASTER_PORT=%d, MASTER_USER=%s, MASTER_PASSWORD=%s, MASTER_USE_GTID=current_pos, MASTER_CONNECT_RETRY=1",
	sourceSSL:    ", MASTER_SSL=1",
}

// mySQL8 is MySQL 8.0.23+ (SHOW REPLICA STATUS, CHANGE REPLICATION SOURCE).
// Covered by SQL-level unit tests only: no MySQL 8 server is installable on
// these machines.
var mySQL8 = dialect{
	name:          "mysql8",
	readOnlyOn:    []string{"SET GLOBAL super_read_only=ON"},
	readOnlyOff:   []string{"SET GLOBAL super_read_only=OFF", "SET GLOBAL read_only=OFF"},
	readOnlyQuery: "SELECT @@global.read_only, @@global.super_read_only",
	gtidExecuted:  "SELECT @@global.gtid_executed",
	waitGTID:      "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, ?)",
	receivedGTID:  "Retrieved_Gtid_Set",
	ioRunning:     "Replica_IO_Running", sqlRunning: "Replica_SQL_Running", lag: "Seconds_Behind_Source", lastIOErrno: "Last_IO_Errno",
	sourceHost: "Source_Host", sourcePort: "Source_Port",
	stopReplica:  "STOP REPLICA",
	resetReplica: "RESET REPLICA ALL",
	startReplica: "START REPLICA",
	changeSource: "CHANGE REPLICATION SOURCE TO SOURCE_HOST=%s, SOURCE_PORT=%d, SOURCE_USER=%s, SOURCE_PASSWORD=%s, SOURCE_AUTO_POSITION=1, SOURCE_CONNECT_RETRY=1",
	sourceSSL:    ", SOURCE_SSL=1",
}

// dialectFor picks the dialect from SELECT VERSION().
func dialectFor(version string) dialect {
	if strings.Contains(strings.ToLower(version), "mariadb") {
		return mariaDB
	}
	return mySQL8
}

// changeSourceSQL renders the statement that points a replica at a source,
// over TLS when ssl (the group requires TLS). CHANGE MASTER/REPLICATION
// SOURCE takes no placeholders, so values are quoted here. Options it does
// not name keep their values: a CA the replica verifies its source with
// (MASTER_SSL_CA, MASTER_SSL_VERIFY_SERVER_CERT) is the server's to set.
func (d dialect) changeSourceSQL(host string, port int, user, password string, ssl bool) string {
	q := fmt.Sprintf(d.changeSource, quote(host), port, quote(user), quote(password))
	if ssl {
		q += d.sourceSSL
	}
	return q
}

// quote is a MySQL string literal.
func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\x00", `\0`, "\n", `\n`, "\r", `\r`, "\x1a", `\Z`)
	return "'" + r.Replace(s) + "'"
}

// Fence table: the topology generation and active site, written on the new
// primary in the same step as its promotion, before it accepts writes. A
// client about to run DDL checks, on the connection it will use:
//
//	SELECT generation, active_site FROM bloodraven.fence WHERE id = 1
//	  AND @@global.read_only = 0
//
// and proceeds only if generation equals the topologyGeneration of its lease.
const (
	fenceSchema = "CREATE DATABASE IF NOT EXISTS bloodraven"
	fenceTable  = "CREATE TABLE IF NOT EXISTS bloodraven.fence (" +
		"id TINYINT UNSIGNED NOT NULL PRIMARY KEY, generation BIGINT NOT NULL, " +
		"active_site VARCHAR(63) NOT NULL, updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))"
	// fenceWrite never replaces a newer generation, nor another site's row
	// of the same generation: the row keeps the greatest generation, and
	// its site changes only with a greater one (generation is assigned
	// last, so the IFs compare with the stored value). The promotion reads
	// the row back (fenceRead) and opens the site only if it is its own.
	fenceWrite = "INSERT INTO bloodraven.fence (id, generation, active_site, updated_at) VALUES (1, ?, ?, CURRENT_TIMESTAMP(6)) " +
		"ON DUPLICATE KEY UPDATE active_site = IF(VALUES(generation) > generation, VALUES(active_site), active_site), " +
		"updated_at = IF(VALUES(generation) > generation, VALUES(updated_at), updated_at), " +
		"generation = GREATEST(generation, VALUES(generation))"
	fenceRead = "SELECT generation, active_site FROM bloodraven.fence WHERE id = 1"
	// fenceUndo puts back the row of the confirmed topology where a
	// rolled-back transition wrote its own (exactly its generation and
	// target): the only write that lowers the generation.
	fenceUndo = "UPDATE bloodraven.fence SET generation = ?, active_site = ?, updated_at = CURRENT_TIMESTAMP(6) " +
		"WHERE id = 1 AND generation = ? AND active_site = ?"
	// FenceQuery is what a client runs to check it talks to the primary of
	// its generation.
	FenceQuery = "SELECT generation, active_site FROM bloodraven.fence WHERE id = 1 AND @@global.read_only = 0"
)

// mariadbGTIDCovers tells whether the MariaDB GTID position have (a
// comma-separated list of domain-server-seq, one per domain) includes want:
// for every domain of want, have holds the same domain at the same or a
// higher sequence number. gtid_strict_mode keeps sequence numbers increasing
// within a domain.
func mariadbGTIDCovers(have, want string) bool {
	seqs := map[string]uint64{}
	for _, g := range strings.Split(have, ",") {
		if d, seq, ok := parseMariaDBGTID(g); ok && seq > seqs[d] {
			seqs[d] = seq
		}
	}
	for _, g := range strings.Split(want, ",") {
		if strings.TrimSpace(g) == "" {
			continue
		}
		d, seq, ok := parseMariaDBGTID(g)
		if !ok {
			return false
		}
		if got, found := seqs[d]; !found || got < seq {
			return false
		}
	}
	return true
}

func parseMariaDBGTID(g string) (domain string, seq uint64, ok bool) {
	parts := strings.Split(strings.TrimSpace(g), "-")
	if len(parts) != 3 {
		return "", 0, false
	}
	n, err := strconv.ParseUint(parts[2], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return parts[0], n, true
}
