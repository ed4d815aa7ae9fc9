package deployapi

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/store/leasestore"
)

type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// rateLimited counts the 429s of the fair share; waitsNotHeld the lease
	// GETs answered at once past the identity's held GETs. Labelled by
	// route and limit only: never by identity, path or group.
	rateLimited  *prometheus.CounterVec
	waitsNotHeld *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, store *leasestore.Store, groups client.Reader, clk clock.PassiveClock) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bloodraven_deploy_api_requests_total",
			Help: "Deployment API requests by handler, status code, and the group and its namespace (both empty when the caller was not authorized for a group).",
		}, []string{"handler", "status", "namespace", "group"}),
		// The histogram has no group label: 12 series per handler and
		// status for every group would be about 10^5 series at the fleet
		// sizes the bench measures; the counter keeps the group.
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bloodraven_deploy_api_request_duration_seconds",
			Help:    "Deployment API request latency by handler, status code, and the namespace of the group (empty when the caller was not authorized for a group).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"handler", "status", "namespace"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bloodraven_deploy_api_rate_limited_total",
			Help: "Deployment API requests answered 429 rate_limited by handler and the per-identity limit they were over (rate, in_flight).",
		}, []string{"handler", "limit"}),
		waitsNotHeld: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bloodraven_deploy_api_waits_not_held_total",
			Help: "Lease GETs with Prefer: wait answered at once because their identity held as many lease GETs as it may, by handler.",
		}, []string{"handler"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.rateLimited, m.waitsNotHeld, &activeLeases{store: store, groups: groups, clock: clk}} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register deploy API metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) observe(handler, status, namespace, group string, d time.Duration) {
	m.requests.WithLabelValues(handler, status, namespace, group).Inc()
	m.duration.WithLabelValues(handler, status, namespace).Observe(d.Seconds())
}

// activeLeases counts live deployment leases at scrape time from the lease
// cache, so the gauge never drifts from what is stored: an expired lease
// stops counting the moment it expires, whether or not anything rewrote it,
// and a failover-hold counts only while its operation holds the live mutex.
// Every group (from groups, when set) reports both kinds, 0 included, so the
// series exist before the first lease.
type activeLeases struct {
	store  *leasestore.Store
	groups client.Reader
	clock  clock.PassiveClock
}

var activeLeasesDesc = prometheus.NewDesc("bloodraven_deploy_leases_active",
	"Live (active, unexpired) deployment leases by namespace, group and kind.",
	[]string{"namespace", "group", "kind"}, nil)

func (a *activeLeases) Describe(ch chan<- *prometheus.Desc) { ch <- activeLeasesDesc }

func (a *activeLeases) Collect(ch chan<- prometheus.Metric) {
	r := a.store.Cached
	if r == nil {
		r = a.store.API
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var list coordinationv1.LeaseList
	if err := r.List(ctx, &list, client.MatchingLabelsSelector{Selector: leasestore.CacheSelector()}); err != nil {
		ch <- prometheus.NewInvalidMetric(activeLeasesDesc, err)
		return
	}
	type key struct{ ns, group, kind string }
	type groupKey struct{ ns, name string }
	counts := map[key]int{}
	uids := map[groupKey]string{}
	if a.groups != nil {
		var gl bloodravenv1alpha1.MysqlFailoverGroupList
		if err := a.groups.List(ctx, &gl); err == nil {
			for _, g := range gl.Items {
				uids[groupKey{g.Namespace, g.Name}] = string(g.UID)
				for _, k := range []leases.Kind{leases.KindMigration, leases.KindFailoverHold} {
					counts[key{g.Namespace, g.Name, string(k)}] = 0
				}
			}
		}
	}
	byGroup := map[groupKey][]*leases.Record{}
	for i := range list.Items {
		rec := a.store.Verified(&list.Items[i])
		if rec == nil {
			continue
		}
		gk := groupKey{list.Items[i].Namespace, rec.Group}
		byGroup[gk] = append(byGroup[gk], rec)
	}
	now := a.clock.Now()
	for gk, recs := range byGroup {
		uid, known := uids[gk]
		if !known {
			for _, r := range recs { // no group list: trust the mutex's own record
				if r.Kind == leases.KindMigration {
					uid = r.GroupUID
				}
			}
		}
		for _, rec := range leases.Effective(recs, uid, now) {
			counts[key{gk.ns, gk.name, string(rec.Kind)}]++
		}
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(activeLeasesDesc, prometheus.GaugeValue, float64(n), k.ns, k.group, k.kind)
	}
}
