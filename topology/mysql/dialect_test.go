package mysql

import (
	"strings"
	"testing"
)

// The MySQL 8 dialect is covered at the SQL level only: no MySQL 8 server is
// installable here. These tests pin the statements it sends.
func TestDialectForVersion(t *testing.T) {
	tests := map[string]string{
		"10.11.19-MariaDB-0+deb12u1": "mariadb",
		"11.4.2-MariaDB":             "mariadb",
		"8.0.36":                     "mysql8",
		"8.4.0-commercial":           "mysql8",
	}
	for v, want := range tests {
		if got := dialectFor(v).name; got != want {
			t.Errorf("%s: %s, want %s", v, got, want)
		}
	}
}

func TestMySQL8Statements(t *testing.T) {
	d := mySQL8
	checks := map[string]struct{ got, want string }{
		"read-only on":    {strings.Join(d.readOnlyOn, "; "), "SET GLOBAL super_read_only=ON"},
		"read-only off":   {strings.Join(d.readOnlyOff, "; "), "SET GLOBAL super_read_only=OFF; SET GLOBAL read_only=OFF"},
		"read-only probe": {d.readOnlyQuery, "SELECT @@global.read_only, @@global.super_read_only"},
		"gtid":            {d.gtidExecuted, "SELECT @@global.gtid_executed"},
		"wait":            {d.waitGTID, "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, ?)"},
		"stop":            {d.stopReplica, "STOP REPLICA"},
		"reset":           {d.resetReplica, "RESET REPLICA ALL"},
		"start":           {d.startReplica, "START REPLICA"},
		"columns":         {d.ioRunning + "," + d.sqlRunning + "," + d.lag, "Replica_IO_Running,Replica_SQL_Running,Seconds_Behind_Source"},
		"change source": {d.changeSourceSQL("db-1.pdx", 3306, "repl", "p'w", false),
			`CHANGE REPLICATION SOURCE TO SOURCE_HOST='db-1.pdx', SOURCE_PORT=3306, SOURCE_USER='repl', SOURCE_PASSWORD='p\'w', SOURCE_AUTO_POSITION=1, SOURCE_CONNECT_RETRY=1`},
		"change source over TLS": {d.changeSourceSQL("db-1.pdx", 3306, "repl", "p'w", true),
			`CHANGE REPLICATION SOURCE TO SOURCE_HOST='db-1.pdx', SOURCE_PORT=3306, SOURCE_USER='repl', SOURCE_PASSWORD='p\'w', SOURCE_AUTO_POSITION=1, SOURCE_CONNECT_RETRY=1, SOURCE_SSL=1`},
	}
	for name, c := range checks {
		if c.got != c.want {
			t.Errorf("%s:\n got  %s\n want %s", name, c.got, c.want)
		}
	}
}

func TestMariaDBChangeMasterUsesGTID(t *testing.T) {
	if got, want := mariaDB.changeSourceSQL("h", 1, "u", "p", true), ", MASTER_USE_GTID=current_pos, MASTER_CONNECT_RETRY=1, MASTER_SSL=1"; !strings.HasSuffix(got, want) {
		t.Errorf("over TLS: got %s, want it to end %q", got, want)
	}
	got := mariaDB.changeSourceSQL("127.0.0.1", 3307, "bloodraven", "x", false)
	want := "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=3307, MASTER_USER='bloodraven', MASTER_PASSWORD='x', MASTER_USE_GTID=current_pos, MASTER_CONNECT_RETRY=1"
	if got != want {
		t.Fatalf("got %s", got)
	}
	if r := redact(got); strings.Contains(r, "PASSWORD") {
		t.Fatalf("redacted statement still holds the password: %s", r)
	}
}

func TestQuoteEscapes(t *testing.T) {
	if got := quote(`a'b\c` + "\x00"); got != `'a\'b\\c\0'` {
		t.Fatalf("quote = %s", got)
	}
}

func TestMariaDBGTIDCovers(t *testing.T) {
	tests := map[string]struct {
		have, want string
		covers     bool
	}{
		"the same position":                          {have: "0-1-5", want: "0-1-5", covers: true},
		"a later position in the domain":             {have: "0-2-7", want: "0-1-5", covers: true},
		"an earlier position":                        {have: "0-1-4", want: "0-1-5", covers: false},
		"the site's own writes, replicated back":     {have: "0-2-5", want: "0-2-5", covers: true},
		"a domain the site never saw":                {have: "0-1-9", want: "0-1-5,1-3-2", covers: false},
		"every domain covered":                       {have: "1-3-2,0-1-9", want: "0-1-5,1-3-2", covers: true},
		"nothing wanted":                             {have: "0-1-1", want: "", covers: true},
		"an unreadable position covers nothing":      {have: "0-1-9", want: "garbage", covers: false},
		"an empty binary log covers a real position": {have: "", want: "0-1-1", covers: false},
	}
	for name, tc := range tests {
		if got := mariadbGTIDCovers(tc.have, tc.want); got != tc.covers {
			t.Errorf("%s: %v, want %v", name, got, tc.covers)
		}
	}
}
