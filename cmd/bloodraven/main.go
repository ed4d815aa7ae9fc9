// Command bloodraven is the operator: the MysqlFailoverGroup controllers, the
// validating webhooks and the optional deployment API, in one process. As
// `bloodraven deploy ...` it is the pipeline's client (package deploycmd).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/go-logr/logr"
	gomysql "github.com/go-sql-driver/mysql"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crzap "sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/shipstream/bloodraven"
	"github.com/shipstream/bloodraven/internal/logbridge"
	"github.com/shipstream/bloodraven/operator"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
	"github.com/shipstream/bloodraven/server"
	"github.com/shipstream/bloodraven/store/leasestore"
	"github.com/shipstream/bloodraven/topology"
	"github.com/shipstream/bloodraven/topology/memory"
	mysqldriver "github.com/shipstream/bloodraven/topology/mysql"
	bloodravenwebhook "github.com/shipstream/bloodraven/webhook"
)

// version is set by `make build` with -ldflags "-X main.version=...": the
// release (file VERSION) and the commit. Unset, Version falls back to the
// embedded VERSION and the commit the Go toolchain recorded.
var version = ""

// Version is the operator's version, for --version, the status page and the
// API server's user agent.
func Version() string { return bloodraven.Version(version) }

// RBAC the operator needs; controller-gen renders config/rbac/role.yaml.
// +kubebuilder:rbac:groups=bloodraven.shipstream.io,resources=mysqlfailovergroups,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=bloodraven.shipstream.io,resources=mysqlfailovergroups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=bloodraven.shipstream.io,resources=mysqldatabases,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=bloodraven.shipstream.io,resources=mysqldatabases/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=bloodraven.shipstream.io,resources=deployruns,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=bloodraven.shipstream.io,resources=deployruns/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingadmissionpolicies;validatingadmissionpolicybindings,verbs=get

func main() {
	root := newRootCommand(os.Stdout, os.Stderr, os.Exit)
	root.SetArgs(os.Args[1:])
	os.Exit(exitCode(root.Execute(), os.Stderr))
}

// errLogged is returned by run for an error it has already written through
// the JSON logger (once the logger exists, every line is JSON, the last one
// included).
var errLogged = errors.New("logged")

func run(args []string, usage io.Writer) error {
	opts, err := parseOptions(args, os.Getenv, usage)
	if err != nil {
		return err
	}
	if opts.printVersionAndExit {
		fmt.Println(Version())
		return nil
	}
	log := newLogger(opts.zap, os.Stderr)
	ctrl.SetLogger(log)
	klog.SetLogger(log)
	// Every line the operator writes is one JSON object: the servers' own
	// error lines and the MySQL driver's go through the same logger.
	logbridge.RedirectStdLog(log)
	if err := gomysql.SetLogger(logbridge.MySQL{Log: log.WithName("mysql")}); err != nil {
		return fmt.Errorf("mysql driver logger: %w", err)
	}

	ctx := ctrl.SetupSignalHandler()
	if err := runManager(ctx, opts, log); err != nil {
		log.Error(err, "the operator stops")
		return errLogged
	}
	return nil
}

// newLogger is controller-runtime's zap logger as the flags set it,
// writing to w: JSON at info unless --zap-devel or --zap-encoder=console.
// Outside --zap-devel it samples, as zap's production configuration does:
// per second, the first 100 entries of a level and message, then every
// 100th, so a flood of requests (junk tokens answered 401) costs a bounded
// number of writes.
func newLogger(z crzap.Options, w io.Writer) logr.Logger {
	z.DestWriter = w
	return crzap.New(crzap.UseFlagOptions(&z))
}

// runManager wires the manager and its listeners and runs until ctx ends.
func runManager(ctx context.Context, opts options, log logr.Logger) error {
	kubeconfig, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cfg := operator.RESTConfig(kubeconfig)
	cfg.QPS = float32(opts.kubeQPS)
	cfg.Burst = opts.kubeBurst
	cfg.UserAgent = "bloodraven/" + Version()

	tlsOpts, err := server.TLSListenerOptions(opts.tlsAddr, opts.tlsCertDir)
	if err != nil {
		return err
	}
	tlsServer := server.NewTLSServer(tlsOpts)
	// The namespaced install (--watch-namespaces) confines every informer,
	// and so every reconcile and every proposal of the deployment API.
	cacheOpts := operator.CacheOptions(opts.watchNamespaces...)
	scheme := bloodravenscheme.New()
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	key, err := leasestore.LoadRecordKey(ctx, direct, opts.leaderElectionNS, opts.recordKeySecret, opts.watchNamespaces...)
	if err != nil {
		return err
	}
	// The leader-election lock is built here, not by the manager, so that
	// the group controller knows its identity and confirms from the Lease
	// that it still leads before it opens or re-points a site.
	clk := clock.RealClock{}
	var leaderLock resourcelock.Interface
	var leading topology.LeaderCheck
	if opts.leaderElection {
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("leader election identity: %w", err)
		}
		id := host + "_" + string(uuid.NewUUID())
		leaderLock, err = resourcelock.New(resourcelock.LeasesResourceLock, opts.leaderElectionNS, opts.leaderElectionID,
			kube.CoreV1(), kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
		if err != nil {
			return fmt.Errorf("leader election lock: %w", err)
		}
		leading = operator.LeaderCheck(kube.CoordinationV1().Leases(opts.leaderElectionNS), opts.leaderElectionID, id, clk)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		LeaderElectionResourceLockInterface: leaderLock,
		Scheme:                              scheme,
		Cache:                               cacheOpts,
		MapperProvider:                      operator.MapperProvider,
		Metrics:                             metricsOptions(opts),
		HealthProbeBindAddress:              opts.probeAddr,
		WebhookServer:                       tlsServer,
		LeaderElection:                      opts.leaderElection,
		LeaderElectionID:                    opts.leaderElectionID,
		LeaderElectionNamespace:             opts.leaderElectionNS,
		LeaderElectionReleaseOnCancel:       true,
		GracefulShutdownTimeout:             &opts.shutdownTimeout,
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}

	var leader server.LeaderState
	elected := closedChan()
	if opts.leaderElection {
		elected = mgr.Elected()
	}
	leader.WatchElected(elected, ctx.Done())
	if opts.leaderLabelPod != "" && opts.leaderElectionNS != "" {
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("leader label: %w", err)
		}
		go server.LabelLeader(kube, opts.leaderElectionNS, opts.leaderLabelPod, elected, ctx.Done(), log.WithName("leader-label"))
	}

	if err := ctrlmetrics.Registry.Register(server.CertificateExpiry(opts.tlsCertDir)); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	unverified, err := unverifiedRecords(ctrlmetrics.Registry, log.WithName("leasestore"))
	if err != nil {
		return err
	}
	guard, err := newLeaseGuardCheck(cfg, opts.leaseGuardPolicy, ctrlmetrics.Registry, log.WithName("lease-guard"))
	if err != nil {
		return err
	}
	if err := mgr.Add(guard); err != nil {
		return fmt.Errorf("lease guard check: %w", err)
	}
	bloodravenwebhook.Register(mgr.GetWebhookServer(), mgr.GetScheme(), opts.operatorIdentity)
	ocfg := operator.Config{
		Driver: topologyDriver(opts, mgr, clk), Clock: clk, Log: log.WithName("deployapi"), Metrics: ctrlmetrics.Registry,
		RecordKey: key, OnUnverified: unverified,
		ProbeInterval: opts.probeInterval, PrimaryProbeInterval: opts.primaryProbeInterval, Workers: opts.groupWorkers,
		ControllerQPS: float32(opts.controllerQPS), ControllerBurst: opts.controllerBurst, Leading: leading,
	}
	if opts.deployAPI {
		kube, err := tokenReviewClient(cfg)
		if err != nil {
			return err
		}
		ocfg.DeployAPI = &operator.DeployAPIConfig{Audience: opts.deployAudience, Kube: kube, FairShare: opts.deployFairShare}
	}
	parts, err := operator.New(mgr, ocfg)
	if err != nil {
		return err
	}
	if opts.deployAPI {
		api, err := parts.NewDeployAPI(leader.IsLeader, ctrlmetrics.Registry)
		if err != nil {
			return err
		}
		tlsServer.HandleDeploy(api.Handler())
		// On SIGTERM, held GETs answer at once: the listener drains, the
		// leader Lease is released and the other replica takes over
		// within its retry period (docs/operator.md, "Stopping").
		go func() {
			<-ctx.Done()
			api.Drain()
		}()
	}

	aux := &server.PlainHTTPServer{
		Addr: opts.auxAddr,
		Handler: server.NewAuxHandler(func() server.StatusInfo {
			return server.StatusInfo{
				Version:        Version(),
				Leader:         leader.IsLeader(),
				DeployAPI:      opts.deployAPI,
				DeployAPIAddr:  deployAddr(opts),
				LeaderElection: opts.leaderElection,
			}
		}),
	}
	if err := mgr.Add(aux); err != nil {
		return fmt.Errorf("auxiliary server: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("healthz: %w", err)
	}
	if err := mgr.AddReadyzCheck("tls-listener", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return fmt.Errorf("readyz: %w", err)
	}

	log.Info("starting operator", "version", Version(), "tlsAddr", opts.tlsAddr, "auxAddr", opts.auxAddr,
		"leaderElection", opts.leaderElection, "deployAPI", opts.deployAPI, "watchNamespaces", opts.watchNamespaces)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	return nil
}

// tokenReviewClient is the deployment API's clientset for TokenReviews,
// built-in types: it speaks protobuf to the API server.
func tokenReviewClient(cfg *rest.Config) (kubernetes.Interface, error) {
	pcfg := rest.CopyConfig(cfg)
	pcfg.ContentType = "application/vnd.kubernetes.protobuf"
	pcfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	kube, err := kubernetes.NewForConfig(pcfg)
	if err != nil {
		return nil, fmt.Errorf("deploy API clientset: %w", err)
	}
	return kube, nil
}

// topologyDriver is the driver --topology-driver names.
func topologyDriver(opts options, mgr ctrl.Manager, clk clock.WithTicker) topology.Driver {
	switch opts.topologyDriver {
	case "simulated":
		sim := memory.New()
		sim.AutoSeed = true
		return sim
	case "mysql":
		return mysqldriver.NewCached(mysqldriver.FromSecrets(mgr.GetAPIReader()), clk)
	}
	return topology.None{}
}

func deployAddr(o options) string {
	if !o.deployAPI {
		return ""
	}
	return o.tlsAddr
}

func closedChan() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
