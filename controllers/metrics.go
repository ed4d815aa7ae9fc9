package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
)

// Metrics of the controller. docs/metrics.md lists them with their labels;
// the chart's alerts use them.
type Metrics struct {
	Deferred          *prometheus.CounterVec
	BookkeepingErrors *prometheus.CounterVec
	// Revoked counts revoked operations by reason; LastRevocation is the
	// time of the group's last revocation by reason.
	Revoked        *prometheus.CounterVec
	LastRevocation *prometheus.GaugeVec
	// Condition is 1 for each of the group's conditions that is True.
	Condition *prometheus.GaugeVec
	// Generation is the group's topology generation.
	Generation *prometheus.GaugeVec
	// StatusWriteErrors counts failed status writes by reason: webhook
	// (the API server could not call the validating webhook), conflict,
	// other.
	StatusWriteErrors *prometheus.CounterVec
	deferrals         *deferrals
}

// NewMetrics registers the controller's metrics with reg (nil: unregistered).
// clk times the age of current deferrals.
func NewMetrics(reg prometheus.Registerer, clk clock.PassiveClock) (*Metrics, error) {
	group := []string{"namespace", "group"}
	m := &Metrics{
		Deferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bloodraven_planned_failovers_deferred_total",
			Help: "Planned operations (planned failover, ordered update, restore-in-place) deferred by a live failover-hold, counted once per deferral.",
		}, []string{"namespace", "group", "operation"}),
		BookkeepingErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bloodraven_lease_bookkeeping_errors_total",
			Help: "Lease bookkeeping passes (revocation, expiry, cleanup) that failed and were retried; the safety paths never wait for them.",
		}, group),
		Revoked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bloodraven_deploy_leases_revoked_total",
			Help: "Deployment operations whose leases the controller revoked, by reason (topology_changed, operator_revoked).",
		}, []string{"namespace", "group", "reason"}),
		LastRevocation: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bloodraven_deploy_leases_last_revocation_timestamp_seconds",
			Help: "Unix time of the group's last revocation of deployment leases by the controller, by reason; 0 before the first.",
		}, []string{"namespace", "group", "reason"}),
		Condition: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bloodraven_group_condition",
			Help: "1 when the group's condition (Ready, Degraded, SplitBrain, NoPrimary, AutomaticFailoverHeld) is True, else 0.",
		}, []string{"namespace", "group", "condition"}),
		Generation: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bloodraven_group_topology_generation",
			Help: "The group's status.topologyGeneration, the fence of every deployment lease.",
		}, group),
		StatusWriteErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bloodraven_status_write_errors_total",
			Help: "Failed writes of a group's status by reason: webhook (the API server could not call the validating webhook; every status write is refused), conflict, other.",
		}, []string{"namespace", "group", "reason"}),
		deferrals: &deferrals{clock: clk, since: map[deferralKey]time.Time{}},
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.Deferred, m.BookkeepingErrors, m.Revoked, m.LastRevocation,
			m.Condition, m.Generation, m.StatusWriteErrors, m.deferrals} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register controller metrics: %w", err)
			}
		}
	}
	return m, nil
}

// conditionTypes are exported by bloodraven_group_condition.
var conditionTypes = []string{bloodravenv1alpha1.ConditionReady, bloodravenv1alpha1.ConditionDegraded, bloodravenv1alpha1.ConditionSplitBrain, bloodravenv1alpha1.ConditionNoPrimary, bloodravenv1alpha1.ConditionAutomaticFailoverHeld}

// initGroup makes every series of a group exist, at zero, from its first
// reconcile, so that rate() and increase() see the first event.
func (m *Metrics) initGroup(g *bloodravenv1alpha1.MysqlFailoverGroup) {
	if m == nil {
		return
	}
	for _, op := range bloodravenv1alpha1.PlannedOperations {
		m.Deferred.WithLabelValues(g.Namespace, g.Name, string(op))
	}
	m.BookkeepingErrors.WithLabelValues(g.Namespace, g.Name)
	for _, reason := range leases.RevocationReasons {
		m.Revoked.WithLabelValues(g.Namespace, g.Name, reason)
		m.LastRevocation.WithLabelValues(g.Namespace, g.Name, reason)
	}
	for _, reason := range []string{"webhook", "conflict", "other"} {
		m.StatusWriteErrors.WithLabelValues(g.Namespace, g.Name, reason)
	}
}

// observeGroup exports the group's status as it stands after a reconcile.
func (m *Metrics) observeGroup(g *bloodravenv1alpha1.MysqlFailoverGroup) {
	if m == nil {
		return
	}
	m.Generation.WithLabelValues(g.Namespace, g.Name).Set(float64(g.Status.TopologyGeneration))
	for _, t := range conditionTypes {
		val := 0.0
		for _, c := range g.Status.Conditions {
			if c.Type == t && c.Status == "True" {
				val = 1
			}
		}
		m.Condition.WithLabelValues(g.Namespace, g.Name, t).Set(val)
	}
	m.deferrals.observe(g)
}

// revoked records a revocation of n operations.
func (m *Metrics) revoked(g *bloodravenv1alpha1.MysqlFailoverGroup, reason string, n int, at time.Time) {
	if m == nil || n == 0 {
		return
	}
	m.Revoked.WithLabelValues(g.Namespace, g.Name, reason).Add(float64(n))
	m.LastRevocation.WithLabelValues(g.Namespace, g.Name, reason).Set(float64(at.UnixNano()) / 1e9)
}

// statusWriteFailed counts a failed status write by its cause.
func (m *Metrics) statusWriteFailed(g *bloodravenv1alpha1.MysqlFailoverGroup, err error) {
	if m == nil {
		return
	}
	reason := "other"
	var se apierrors.APIStatus
	switch {
	case apierrors.IsConflict(err):
		reason = "conflict"
	case errors.As(err, &se) && strings.Contains(se.Status().Message, "failed calling webhook"):
		reason = "webhook"
	}
	m.StatusWriteErrors.WithLabelValues(g.Namespace, g.Name, reason).Inc()
}

// forget drops a deleted group's series.
func (m *Metrics) forget(g *bloodravenv1alpha1.MysqlFailoverGroup) {
	if m == nil {
		return
	}
	match := prometheus.Labels{"namespace": g.Namespace, "group": g.Name}
	for _, v := range []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{m.Deferred, m.BookkeepingErrors, m.Revoked, m.LastRevocation, m.Condition, m.Generation, m.StatusWriteErrors} {
		v.DeletePartialMatch(match)
	}
	m.deferrals.forget(g.Namespace, g.Name)
}

type deferralKey struct{ namespace, group, operation string }

// deferrals exports bloodraven_planned_operation_deferral_age_seconds: how
// long each currently deferred operation has been deferred, computed at
// scrape time. The start is kept in this replica's memory: after a restart
// or a leader change the age counts from the first reconcile that saw the
// deferral.
type deferrals struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	since map[deferralKey]time.Time
}

var deferralAgeDesc = prometheus.NewDesc("bloodraven_planned_operation_deferral_age_seconds",
	"Seconds the planned operation has been deferred by a live failover-hold, as this replica saw it; absent when not deferred.",
	[]string{"namespace", "group", "operation"}, nil)

func (d *deferrals) Describe(ch chan<- *prometheus.Desc) { ch <- deferralAgeDesc }

func (d *deferrals) Collect(ch chan<- prometheus.Metric) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.clock.Now()
	for k, since := range d.since {
		ch <- prometheus.MustNewConstMetric(deferralAgeDesc, prometheus.GaugeValue, now.Sub(since).Seconds(), k.namespace, k.group, k.operation)
	}
}

func (d *deferrals) observe(g *bloodravenv1alpha1.MysqlFailoverGroup) {
	deferred := map[string]bool{}
	for _, op := range bloodravenv1alpha1.PlannedOperations {
		deferred[string(op)] = g.Status.Operation(op, nil).Phase == bloodravenv1alpha1.PhaseDeferred
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for op, is := range deferred {
		k := deferralKey{g.Namespace, g.Name, op}
		_, was := d.since[k]
		switch {
		case is && !was:
			d.since[k] = d.clock.Now()
		case !is && was:
			delete(d.since, k)
		}
	}
}

func (d *deferrals) forget(namespace, group string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k := range d.since {
		if k.namespace == namespace && k.group == group {
			delete(d.since, k)
		}
	}
}

// Verification gates: bloodraven_databases_awaiting_verification and
// bloodraven_verification_longest_wait_seconds, by namespace, computed at
// scrape time from the databases' status.pendingVerification.

// gateMetricNames are the names of the verification gate metrics.
var gateMetricNames = []string{"bloodraven_databases_awaiting_verification", "bloodraven_verification_longest_wait_seconds"}

var (
	gatedDatabasesDesc = prometheus.NewDesc(gateMetricNames[0],
		"MysqlDatabases whose verification gate is closed (status.pendingVerification set: every new migration is refused until a person verifies the schema), by namespace; 0 in a namespace with databases and no closed gate.",
		[]string{"namespace"}, nil)
	longestWaitDesc = prometheus.NewDesc(gateMetricNames[1],
		"Seconds since the oldest closed verification gate of the namespace closed (its pendingVerification.since); 0 when none is closed.",
		[]string{"namespace"}, nil)
)

// GateFigure is what the gate metrics export for one namespace.
type GateFigure struct {
	Gated       int
	LongestWait time.Duration
}

// GateFigures counts the closed verification gates of dbs by namespace at
// now: every namespace with a database has a figure, so its series exist
// before the first gate closes. A gate whose since lies ahead of now (a
// clock step) waits 0.
func GateFigures(dbs []bloodravenv1alpha1.MysqlDatabase, now time.Time) map[string]GateFigure {
	out := map[string]GateFigure{}
	for i := range dbs {
		db := &dbs[i]
		f := out[db.Namespace]
		if pv := db.Status.PendingVerification; pv != nil {
			f.Gated++
			f.LongestWait = max(f.LongestWait, now.Sub(pv.Since.Time))
		}
		out[db.Namespace] = f
	}
	return out
}

// gates is the collector of the verification gate metrics. Every replica
// exports them from its own cache (the alert takes the max).
type gates struct {
	reader client.Reader
	clock  clock.PassiveClock
}

// RegisterGateMetrics registers the verification gate metrics with reg,
// read from reader (the manager's cache) at every scrape.
func RegisterGateMetrics(reg prometheus.Registerer, reader client.Reader, clk clock.PassiveClock) error {
	if err := reg.Register(&gates{reader: reader, clock: clk}); err != nil {
		return fmt.Errorf("register verification gate metrics: %w", err)
	}
	return nil
}

func (g *gates) Describe(ch chan<- *prometheus.Desc) {
	ch <- gatedDatabasesDesc
	ch <- longestWaitDesc
}

func (g *gates) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var list bloodravenv1alpha1.MysqlDatabaseList
	if err := g.reader.List(ctx, &list); err != nil {
		ch <- prometheus.NewInvalidMetric(gatedDatabasesDesc, err)
		ch <- prometheus.NewInvalidMetric(longestWaitDesc, err)
		return
	}
	for ns, f := range GateFigures(list.Items, g.clock.Now()) {
		ch <- prometheus.MustNewConstMetric(gatedDatabasesDesc, prometheus.GaugeValue, float64(f.Gated), ns)
		ch <- prometheus.MustNewConstMetric(longestWaitDesc, prometheus.GaugeValue, max(0, f.LongestWait.Seconds()), ns)
	}
}
