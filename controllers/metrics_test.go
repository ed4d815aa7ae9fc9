package controllers

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/testenv"
	"github.com/shipstream/bloodraven/leases"
)

// deferralAge reads the age series of op, or -1 when it is absent.
func (f *fixture) deferralAge(op bloodravenv1alpha1.OperationName) float64 {
	f.t.Helper()
	fams, err := f.reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, fam := range fams {
		if fam.GetName() != "bloodraven_planned_operation_deferral_age_seconds" {
			continue
		}
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == f.ns && labels["operation"] == string(op) {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

func TestMetricsFollowTheGroup(t *testing.T) {
	f := newFixture(t, true)
	f.settle()
	m := f.metrics
	if got := testutil.ToFloat64(m.Generation.WithLabelValues(f.ns, "playground")); got != 1 {
		t.Fatalf("generation gauge %v, want 1", got)
	}
	for cond, want := range map[string]float64{bloodravenv1alpha1.ConditionReady: 1, bloodravenv1alpha1.ConditionNoPrimary: 0, bloodravenv1alpha1.ConditionSplitBrain: 0, bloodravenv1alpha1.ConditionDegraded: 0} {
		if got := testutil.ToFloat64(m.Condition.WithLabelValues(f.ns, "playground", cond)); got != want {
			t.Errorf("condition %s = %v, want %v", cond, got, want)
		}
	}
	// The revocation and status-write series exist at 0 before anything happened.
	if n := testutil.CollectAndCount(m.Revoked); n != len(leases.RevocationReasons) {
		t.Fatalf("%d revocation series after the first reconcile, want %d (every reason, at 0)", n, len(leases.RevocationReasons))
	}

	// A deferral: its age is exported while it lasts, on the controller's clock.
	f.grant("migration", "op-1", 120)
	f.grant("failover-hold", "op-1", 120)
	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
		g.Spec.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverRequest{ID: "req-1", TargetSite: "pdx"}
	})
	f.settle()
	if age := f.deferralAge(bloodravenv1alpha1.OperationPlannedFailover); age != 0 {
		t.Fatalf("deferral age %v right after the deferral, want 0", age)
	}
	f.clock.Step(40 * time.Second)
	if age := f.deferralAge(bloodravenv1alpha1.OperationPlannedFailover); age != 40 {
		t.Fatalf("deferral age %v after 40 s, want 40", age)
	}

	// Revoking by hand is counted and timed; the failover then proceeds and
	// the deferral's series goes away.
	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
		g.Annotations = map[string]string{bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation: "incident-1"}
	})
	f.settle()
	if got := testutil.ToFloat64(m.Revoked.WithLabelValues(f.ns, "playground", "operator_revoked")); got != 1 {
		t.Fatalf("operator_revoked count %v, want 1", got)
	}
	if got, want := testutil.ToFloat64(m.LastRevocation.WithLabelValues(f.ns, "playground", "operator_revoked")), float64(f.clock.Now().UnixNano())/1e9; got != want {
		t.Fatalf("last revocation %v, want %v", got, want)
	}
	f.settle()
	if g := f.get(); g.Status.TopologyGeneration != 2 {
		t.Fatalf("the planned failover did not proceed: %+v", g.Status.PlannedFailover)
	}
	if age := f.deferralAge(bloodravenv1alpha1.OperationPlannedFailover); age != -1 {
		t.Fatalf("deferral age %v after the failover, want no series", age)
	}
	if got := testutil.ToFloat64(m.Generation.WithLabelValues(f.ns, "playground")); got != 2 {
		t.Fatalf("generation gauge %v, want 2", got)
	}
}

func TestStatusWriteErrorsAreCountedByCause(t *testing.T) {
	m, err := NewMetrics(nil, clocktesting.NewFakeClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	g := &bloodravenv1alpha1.MysqlFailoverGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders"}}
	gr := schema.GroupResource{Group: bloodravenv1alpha1.GroupVersion.Group, Resource: "mysqlfailovergroups"}
	for want, err := range map[string]error{
		// What the API server answers when it cannot reach the webhook.
		"webhook":  apierrors.NewInternalError(errors.New(`failed calling webhook "vmysqlfailovergroupstatus.bloodraven.shipstream.io": failed to call webhook: Post "https://bloodraven.bloodraven.svc:8443/validate": context deadline exceeded`)),
		"conflict": apierrors.NewConflict(gr, "orders", errors.New("the object has been modified")),
		"other":    apierrors.NewTooManyRequests("slow down", 1),
	} {
		m.statusWriteFailed(g, fmt.Errorf("write status: %w", err))
		if got := testutil.ToFloat64(m.StatusWriteErrors.WithLabelValues("ns", "orders", want)); got != 1 {
			t.Errorf("%s: count %v, want 1", want, got)
		}
	}
}

func TestEveryEventAndMetricIsDocumented(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	events := read("events.md")
	for _, e := range allEvents {
		if !strings.Contains(events, fmt.Sprintf("| `%s` | %s |", e.Reason, e.Type)) {
			t.Errorf("docs/events.md has no row for %s (%s)", e.Reason, e.Type)
		}
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg, clocktesting.NewFakeClock(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	g := &bloodravenv1alpha1.MysqlFailoverGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g"},
		Status: bloodravenv1alpha1.MysqlFailoverGroupStatus{UpdatePhase: bloodravenv1alpha1.PhaseDeferred}}
	m.initGroup(g)
	m.observeGroup(g)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	metrics := read("metrics.md")
	names := append([]string{}, gateMetricNames...) // collected at scrape time from the databases: no series without one
	for _, f := range fams {
		names = append(names, f.GetName())
	}
	for _, name := range names {
		if !strings.Contains(metrics, "| `"+name+"` |") {
			t.Errorf("docs/metrics.md has no row for %s", name)
		}
	}
	// Every revocation reason is a series from the group's first reconcile
	// and is named in the revoked counter's row.
	var row string
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "| `bloodraven_deploy_leases_revoked_total` |") {
			row = line
		}
	}
	if n := testutil.CollectAndCount(m.Revoked); n != len(leases.RevocationReasons) {
		t.Errorf("%d revocation series after initGroup, want one per reason (%d): a reason is missing from the series made at zero", n, len(leases.RevocationReasons))
	}
	for _, reason := range leases.RevocationReasons {
		if !strings.Contains(row, "`"+reason+"`") {
			t.Errorf("docs/metrics.md's bloodraven_deploy_leases_revoked_total row does not name the reason %s", reason)
		}
		if got := testutil.ToFloat64(m.Revoked.WithLabelValues("ns", "g", reason)); got != 0 {
			t.Errorf("revoked{reason=%s} = %v before any revocation, want 0", reason, got)
		}
	}
	if len(fams) < 8 {
		t.Fatalf("only %d metric families gathered", len(fams))
	}
}
