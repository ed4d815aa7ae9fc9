package controllers

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the controller.
type Metrics struct {
	Deferred          *prometheus.CounterVec
	BookkeepingErrors *prometheus.CounterVec
}

// NewMetrics registers the controller's metrics with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Deferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bloodraven_planned_failovers_deferred_total",
			Help: "Planned operations (planned failover, ordered update, restore-in-place) deferred by a live failover-hold, counted once per deferral.",
		}, []string{"namespace", "group", "operation"}),
		BookkeepingErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bloodraven_lease_bookkeeping_errors_total",
			Help: "Lease bookkeeping passes (revocation, expiry, cleanup) that failed and were retried; the safety paths never wait for them.",
		}, []string{"namespace", "group"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.Deferred, m.BookkeepingErrors} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register controller metrics: %w", err)
			}
		}
	}
	return m, nil
}
