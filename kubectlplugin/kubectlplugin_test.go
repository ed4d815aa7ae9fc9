package kubectlplugin

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
)

var now = time.Date(2026, 12, 3, 4, 0, 0, 0, time.UTC)

func record(kind leases.Kind, op string, state leases.State, expiresIn time.Duration) *leases.Record {
	return &leases.Record{Group: "orders", Kind: kind, OperationID: op, Instance: "orders-db", Identity: "system:serviceaccount:ci:deploy",
		State: state, Generation: 4, TTLSeconds: 60, ExpiresAt: now.Add(expiresIn), GrantedAt: now.Add(-time.Minute),
		TokenHash: "c2VjcmV0LWhhc2gtb2YtdGhlLXRva2Vu", Phase: leases.PhaseDDL}
}

// What the person on call reads: who holds the mutex and the holds, the
// planned operation's deferral and retry time; an expired record is not a
// holder; a token's hash is never printed.
func TestTheStatusAndLeasesAnswers(t *testing.T) {
	g := &bloodravenv1alpha1.MysqlFailoverGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}}
	g.Status.ActiveSite, g.Status.TopologyGeneration = "iad", 4
	retry := metav1.NewMicroTime(now.Add(45 * time.Second))
	g.Status.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverStatus{ID: "f-1", TargetSite: "pdx", Phase: bloodravenv1alpha1.PlannedFailoverPhaseDeferred,
		Admission: &bloodravenv1alpha1.Admission{DeferReason: bloodravenv1alpha1.DeferReasonDeploymentHold, RetryTime: &retry}}
	g.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: "True"}, {Type: "Degraded", Status: "False"}}
	recs := []*leases.Record{
		record(leases.KindMigration, "op-1", leases.StateActive, 30*time.Second),
		record(leases.KindFailoverHold, "op-1", leases.StateActive, 30*time.Second),
		record(leases.KindFailoverHold, "op-0", leases.StateActive, -time.Second), // lapsed
		record(leases.KindMigration, "op-old", leases.StateRevoked, -time.Hour),
	}
	recs[3].Reason = leases.ReasonTopologyChanged

	var out bytes.Buffer
	writeStatus(&out, g, recs, now)
	for _, want := range []string{"Primary:     iad", "Generation:  4", "Conditions:  Ready\n",
		"Planned:     failover f-1 to pdx: Deferred (DeploymentHold, retry at 2026-12-03T04:00:45Z)",
		"Mutex:       op-1 (instance orders-db, generation 4, expires in 30s), phase ddl",
		"Holds:       op-1 (instance orders-db, generation 4, expires in 30s)\n",
		`Cut-over:    not allowed: PlannedOperationPending: PlannedFailover "f-1" is Deferred`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "op-0") {
		t.Errorf("a lapsed hold is shown as a holder:\n%s", out.String())
	}

	out.Reset()
	if err := (printer{out: &out}).writeLeaseList([]groupRecords{{g, recs}}, true, false, now); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines:\n%s", len(lines), out.String())
	}
	for i, want := range [][]string{
		{"migration", "op-1", "orders-db", "active", "-", "4", "ddl", "in", "30s"},
		{"failover-hold", "op-1", "orders-db", "active", "-", "4", "-", "in", "30s"},
		{"failover-hold", "op-0", "orders-db", "expired", "-", "4", "-", "1s", "ago"},
		{"migration", "op-old", "orders-db", "revoked", "topology_changed", "4", "ddl", "1h0m0s", "ago"},
	} {
		if got := strings.Fields(lines[i+1]); strings.Join(got[:len(want)], " ") != strings.Join(want, " ") {
			t.Errorf("line %d = %q, want %q", i+1, got, want)
		}
	}
	if strings.Contains(out.String(), recs[0].TokenHash) {
		t.Fatal("a token hash was printed")
	}
}
