package controllers

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/scene"
)

func TestGateFiguresCountClosedGatesByNamespace(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	const open = time.Duration(math.MinInt64) // the database's gate is open
	db := func(ns string, closedFor time.Duration) bloodravenv1alpha1.MysqlDatabase {
		d := bloodravenv1alpha1.MysqlDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}}
		if closedFor != open {
			d.Status.PendingVerification = &bloodravenv1alpha1.SchemaVerification{OperationID: "op", Ended: "revoked",
				Since: metav1.NewTime(now.Add(-closedFor))}
		}
		return d
	}
	for _, tc := range []struct {
		name string
		dbs  []bloodravenv1alpha1.MysqlDatabase
		want map[string]GateFigure
	}{
		{"no databases: no series", nil, map[string]GateFigure{}},
		{"a namespace without a closed gate reports zero", []bloodravenv1alpha1.MysqlDatabase{db("a", open)},
			map[string]GateFigure{"a": {}}},
		{"closed gates are counted and the oldest gives the wait",
			[]bloodravenv1alpha1.MysqlDatabase{db("a", open), db("a", 5*time.Minute), db("a", 2*time.Hour), db("b", time.Minute)},
			map[string]GateFigure{"a": {Gated: 2, LongestWait: 2 * time.Hour}, "b": {Gated: 1, LongestWait: time.Minute}}},
		{"a gate closed after now (a clock step) waits zero", []bloodravenv1alpha1.MysqlDatabase{db("a", -time.Minute)},
			map[string]GateFigure{"a": {Gated: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := GateFigures(tc.dbs, now)
			if len(got) != len(tc.want) {
				t.Fatalf("figures %+v, want %+v", got, tc.want)
			}
			for ns, w := range tc.want {
				if got[ns] != w {
					t.Errorf("namespace %s: %+v, want %+v", ns, got[ns], w)
				}
			}
		})
	}
}

// gauge reads one namespace's value of a gate metric from reg, or -1.
func gauge(t *testing.T, reg *prometheus.Registry, name, ns string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "namespace" && l.GetValue() == ns {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

func TestGateMetricsFollowTheDatabasesStatus(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	clk := clocktesting.NewFakeClock(time.Now().UTC().Truncate(time.Second))
	reg := prometheus.NewRegistry()
	if err := RegisterGateMetrics(reg, env.Client, clk); err != nil {
		t.Fatal(err)
	}
	a := scene.Database(ns, "a-app", "playground")
	b := scene.Database(ns, "b-app", "playground")
	for _, d := range []*bloodravenv1alpha1.MysqlDatabase{a, b} {
		if err := env.Client.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if n, w := gauge(t, reg, "bloodraven_databases_awaiting_verification", ns), gauge(t, reg, "bloodraven_verification_longest_wait_seconds", ns); n != 0 || w != 0 {
		t.Fatalf("before any gate closed: %v gated, longest wait %v; want both series at 0", n, w)
	}
	a.Status.PendingVerification = &bloodravenv1alpha1.SchemaVerification{OperationID: "op-1", Ended: "revoked",
		Reason: "topology_changed", Since: metav1.NewTime(clk.Now())}
	if err := env.Client.Status().Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	clk.Step(90 * time.Minute)
	if n, w := gauge(t, reg, "bloodraven_databases_awaiting_verification", ns), gauge(t, reg, "bloodraven_verification_longest_wait_seconds", ns); n != 1 || w != 5400 {
		t.Fatalf("a gate closed 90 minutes ago: %v gated, longest wait %v s; want 1 and 5400", n, w)
	}
	a.Status.PendingVerification = nil
	if err := env.Client.Status().Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	if n, w := gauge(t, reg, "bloodraven_databases_awaiting_verification", ns), gauge(t, reg, "bloodraven_verification_longest_wait_seconds", ns); n != 0 || w != 0 {
		t.Fatalf("after verification: %v gated, longest wait %v; want 0 and 0", n, w)
	}
}
