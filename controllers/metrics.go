package controllers

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the controller.
type Metrics struct {
	Deferred *prometheus.CounterVec
}

// NewMetrics registers the controller's metrics with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Deferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bloodraven_planned_failovers_deferred_total",
			Help: "Planned operations (planned failover, ordered update, restore-in-place) deferred by a live failover-hold, counted once per deferral.",
		}, []string{"namespace", "group", "operation"}),
	}
	if reg != nil {
		if err := reg.Register(m.Deferred); err != nil {
			return nil, fmt.Errorf("register controller metrics: %w", err)
		}
	}
	return m, nil
}
