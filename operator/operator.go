package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/shipstream/bloodraven/controllers"
	"github.com/shipstream/bloodraven/deployapi"
	"github.com/shipstream/bloodraven/store/leasestore"
	"github.com/shipstream/bloodraven/topology"
	"github.com/shipstream/bloodraven/topology/prober"
)

// Config is what the running parts need besides the manager. The binary
// fills it from its flags; a test harness overrides the driver, the clock,
// the log and the registries, and takes the rest as the binary does.
type Config struct {
	// Driver is the topology driver; nil is topology.None (the group
	// controller then observes nothing and promotes nothing).
	Driver topology.Driver
	// Clock is the one clock every part reads.
	Clock clock.WithTicker
	// Log receives the deployment API's request lines.
	Log logr.Logger
	// Metrics registers the controller's metrics.
	Metrics prometheus.Registerer

	// RecordKey authenticates lease records (leasestore.LoadRecordKey);
	// OnUnverified is told of a record that fails verification.
	RecordKey    *leasestore.RecordKey
	OnUnverified leasestore.Unverified

	// ProbeInterval is the routine reconcile period of a group;
	// PrimaryProbeInterval the background prober's (0: its default).
	ProbeInterval, PrimaryProbeInterval time.Duration
	// Workers of the group controller (0: controllers.DefaultWorkers).
	Workers int
	// ControllerQPS and ControllerBurst limit the controller's own client,
	// apart from the deployment API's (controllers.OwnClients).
	ControllerQPS   float32
	ControllerBurst int

	// DeployAPI, when set, builds the deployment API (Parts.NewDeployAPI).
	DeployAPI *DeployAPIConfig

	// Leading, when set, confirms this replica still leads before the group
	// controller opens or re-points a site (LeaderCheck builds it from the
	// leader-election Lease).
	Leading topology.LeaderCheck
}

// DeployAPIConfig is what the deployment API needs besides the manager.
type DeployAPIConfig struct {
	// Audience of deploy tokens (empty: deployapi's default).
	Audience string
	// Kube performs TokenReviews.
	Kube kubernetes.Interface
	// FairShare are the per-identity limits (zero fields: their defaults).
	FairShare deployapi.FairShare
}

// Parts are the running parts on one manager. The controllers are
// registered with it; the deployment API is built by NewDeployAPI, once
// per replica, and served by the caller (on the TLS listener, or a test's).
type Parts struct {
	// Leases is the deployment API's lease store: the manager's client.
	Leases *leasestore.Store
	// Group and Database are the registered reconcilers; Prober the
	// group controller's background prober.
	Group    *controllers.GroupReconciler
	Database *controllers.DatabaseReconciler
	Prober   *prober.Prober
	// NewDeployAPI builds a deployment API over the manager's caches and
	// Leases, leading when isLeader says so, with its metrics in reg (nil:
	// none). Nil unless Config.DeployAPI was set.
	NewDeployAPI func(isLeader func() bool, reg prometheus.Registerer) (*deployapi.Server, error)
}

// New builds the running parts on mgr and registers the controllers (the
// group controller runs on the leader only; the database controller too).
// The manager is started by the caller.
func New(mgr ctrl.Manager, cfg Config) (*Parts, error) {
	if cfg.Clock == nil || cfg.RecordKey == nil || cfg.Metrics == nil {
		return nil, errors.New("operator: Config needs Clock, RecordKey and Metrics")
	}
	drv := cfg.Driver
	if drv == nil {
		drv = topology.None{}
	}
	p := &Parts{
		Leases: &leasestore.Store{Client: mgr.GetClient(), Cached: mgr.GetCache(), API: mgr.GetAPIReader(), Clock: cfg.Clock,
			Key: cfg.RecordKey, OnUnverified: cfg.OnUnverified},
		Prober: &prober.Prober{Driver: drv, Clock: cfg.Clock, Interval: cfg.PrimaryProbeInterval},
	}
	m, err := controllers.NewMetrics(cfg.Metrics, cfg.Clock)
	if err != nil {
		return nil, err
	}
	if err := controllers.RegisterGateMetrics(cfg.Metrics, mgr.GetCache(), cfg.Clock); err != nil {
		return nil, err
	}
	qps, burst := cfg.ControllerQPS, cfg.ControllerBurst
	if qps <= 0 {
		qps, burst = DefaultControllerQPS, DefaultControllerBurst
	}
	cc, api, err := controllers.OwnClients(mgr, qps, burst)
	if err != nil {
		return nil, err
	}
	p.Group = &controllers.GroupReconciler{
		Client: cc, API: api, Driver: drv, Clock: cfg.Clock, Metrics: m,
		Leases: &leasestore.Store{Client: cc, Cached: mgr.GetCache(), API: api, Clock: cfg.Clock,
			Key: cfg.RecordKey, OnUnverified: cfg.OnUnverified},
		//lint:ignore SA1019 core/v1 Events: what docs/events.md, kubectl get events and the tests read
		Recorder:      mgr.GetEventRecorderFor("bloodraven"),
		ProbeInterval: cfg.ProbeInterval, Prober: p.Prober, Workers: cfg.Workers, Leading: cfg.Leading,
	}
	if err := p.Group.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("group controller: %w", err)
	}
	// The deployment API proposes a caller's databases from this index,
	// and the database controller finds a group's databases by it.
	if err := deployapi.IndexDatabases(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return nil, err
	}
	p.Database = &controllers.DatabaseReconciler{Client: mgr.GetClient(), Clock: cfg.Clock,
		GroupIndex: deployapi.GroupRefField,
		//lint:ignore SA1019 core/v1 Events, as the group controller's
		Recorder: mgr.GetEventRecorderFor("bloodraven")}
	if err := p.Database.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("database controller: %w", err)
	}
	if d := cfg.DeployAPI; d != nil {
		api, err := newDirectReader(mgr.GetConfig(), mgr.GetHTTPClient(), mgr.GetAPIReader())
		if err != nil {
			return nil, fmt.Errorf("deployment API reader: %w", err)
		}
		p.NewDeployAPI = func(isLeader func() bool, reg prometheus.Registerer) (*deployapi.Server, error) {
			return deployapi.New(deployapi.Config{
				Audience: d.Audience, IsLeader: isLeader, Clock: cfg.Clock, Kube: d.Kube,
				API: api, Databases: mgr.GetCache(), Groups: mgr.GetCache(), Informers: mgr.GetCache(),
				Leases: p.Leases, Log: cfg.Log, Metrics: reg, FairShare: d.FairShare,
			})
		}
	}
	return p, nil
}

// RESTConfig is cfg as the operator's clients use it: a copy that asks the
// API server for uncompressed responses. The operator talks to the API
// server inside the cluster, where bandwidth is cheap and CPU is not: with
// compression, every watch event of every deployment Lease renewal is
// gzipped by kube-apiserver and gunzipped by the operator.
func RESTConfig(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.DisableCompression = true
	return out
}

// The controller client's default limits (the binary's
// --controller-api-qps and --controller-api-burst).
const (
	DefaultControllerQPS   = 1000
	DefaultControllerBurst = 2000
)

// CacheOptions is the manager's cache: deployment Leases by label, never a
// tombstone once announced (leasestore.CacheByObject), every object without
// its managed fields (the operator never reads them; an object written back
// from the cache carries none, so the API server keeps the live ones, and a
// deployment Lease's are dropped by leasestore anyway), and, when namespaces
// are given, every informer confined to them (the namespaced install: every
// reconcile and every proposal of the deployment API).
func CacheOptions(namespaces ...string) cache.Options {
	opts := cache.Options{ByObject: leasestore.CacheByObject(), DefaultTransform: cache.TransformStripManagedFields()}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}
