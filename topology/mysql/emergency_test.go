package mysql

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// Each dialect names the SHOW REPLICA STATUS column of the transactions a
// replica has received and the function that waits until they are applied.
// At the fix, the emergency promotion read MariaDB's Gtid_IO_Pos on every
// server: on MySQL 8 the column does not exist, so it waited for nothing.
func TestEachDialectWaitsForWhatItsReplicaReceived(t *testing.T) {
	tests := []struct {
		d                  dialect
		receivedColumn     string
		waitStatement      string
		stop, reset, start string
	}{
		{mariaDB, "Gtid_IO_Pos", "SELECT MASTER_GTID_WAIT(?, ?)", "STOP SLAVE", "RESET SLAVE ALL", "START SLAVE"},
		{mySQL8, "Retrieved_Gtid_Set", "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, ?)", "STOP REPLICA", "RESET REPLICA ALL", "START REPLICA"},
	}
	for _, tc := range tests {
		t.Run(tc.d.name, func(t *testing.T) {
			if tc.d.receivedGTID != tc.receivedColumn {
				t.Errorf("received-GTID column %q, want %q", tc.d.receivedGTID, tc.receivedColumn)
			}
			if tc.d.waitGTID != tc.waitStatement {
				t.Errorf("wait %q, want %q", tc.d.waitGTID, tc.waitStatement)
			}
			if tc.d.stopReplica != tc.stop || tc.d.resetReplica != tc.reset || tc.d.startReplica != tc.start {
				t.Errorf("stop/reset/start %q %q %q", tc.d.stopReplica, tc.d.resetReplica, tc.d.startReplica)
			}
		})
	}
}

// An emergency promotion waits, on the target, until every transaction
// its replication received is applied, with the dialect's own column and
// wait function, before it stops and resets replication (which discards
// the relay log, and with it whatever was received but not applied). The
// statements are recorded at the SQL level: no MySQL 8 server runs here.
// At the fix, a MySQL 8 target was stopped and reset without any wait:
// acknowledged transactions it had received were lost.
func TestEmergencyPromotionAppliesWhatTheTargetReceivedBeforeResettingIt(t *testing.T) {
	const mysqlSet = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-77,\n" +
		"4a9b1c2d-71ca-11e1-9e33-c80aa9429562:1-5"
	tests := []struct {
		name     string
		rec      *recorder
		wantWait string
		stop     string
		reset    string
	}{
		{
			name: "mysql8",
			rec: &recorder{version: "8.0.36", gtidExecuted: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-70",
				replicaStatus: [][2]string{
					{"Replica_IO_Running", "No"}, {"Replica_SQL_Running", "Yes"}, {"Seconds_Behind_Source", ""},
					{"Retrieved_Gtid_Set", mysqlSet},
					{"Executed_Gtid_Set", "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-70"},
				}},
			wantWait: statement("SELECT WAIT_FOR_EXECUTED_GTID_SET(?, ?)",
				"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-77,4a9b1c2d-71ca-11e1-9e33-c80aa9429562:1-5", 7),
			stop: "STOP REPLICA", reset: "RESET REPLICA ALL",
		},
		{
			name: "mariadb",
			rec: &recorder{version: "10.11.6-MariaDB-0+deb12u1", gtidExecuted: "0-1-40",
				replicaStatus: [][2]string{
					{"Slave_IO_Running", "No"}, {"Slave_SQL_Running", "Yes"}, {"Seconds_Behind_Master", ""},
					{"Gtid_IO_Pos", "0-1-42"},
				}},
			wantWait: statement("SELECT MASTER_GTID_WAIT(?, ?)", "0-1-42", 7),
			stop:     "STOP SLAVE", reset: "RESET SLAVE ALL",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.rec.fenceGen, tc.rec.fenceActive = 2, "pdx"
			g := &bloodravenv1alpha1.MysqlFailoverGroup{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "db", UID: "uid-orders"},
				Spec: bloodravenv1alpha1.MysqlFailoverGroupSpec{Sites: []bloodravenv1alpha1.Site{
					{Name: "iad", Host: "10.0.0.1", Port: 3306}, // the lost primary
					{Name: "pdx", Host: "10.0.0.2", Port: 3306},
				}}}
			d := New(Static(Account{User: "bloodraven", Password: "s3cret"}))
			d.WaitTimeout = 7 * time.Second
			d.connect = connectTo("10.0.0.2:3306", tc.rec)
			t.Cleanup(d.Close)
			if err := d.Promote(context.Background(), g, "pdx", 2, false); err != nil {
				t.Fatal(err)
			}
			log := tc.rec.statements()
			wait := slices.Index(log, tc.wantWait)
			stop := slices.Index(log, tc.stop)
			reset := slices.Index(log, tc.reset)
			if wait < 0 {
				t.Fatalf("the target never waited for what it received (%s); statements:\n%s", tc.wantWait, strings.Join(log, "\n"))
			}
			if stop < 0 || reset < 0 || !(wait < stop && stop < reset) {
				t.Fatalf("wait at %d, %s at %d, %s at %d: the relay log must be reset only after the wait; statements:\n%s",
					wait, tc.stop, stop, tc.reset, reset, strings.Join(log, "\n"))
			}
		})
	}
}
