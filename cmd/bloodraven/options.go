package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/util/validation"
	crzap "sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/shipstream/bloodraven/deployapi"
	"github.com/shipstream/bloodraven/server"
)

// Environment variables the Helm chart sets. A flag given on the command line
// wins over its environment variable; the variable wins over the default.
const (
	envTLSAddr        = "BLOODRAVEN_ESCROW_TLS_ADDR"
	envTLSCertDir     = "BLOODRAVEN_TLS_CERT_DIR"
	envDeployAPI      = "BLOODRAVEN_DEPLOY_API"
	envDeployAudience = "BLOODRAVEN_DEPLOY_AUDIENCE"
	envLeaderElection = "BLOODRAVEN_LEADER_ELECTION"
	envLeaderElectNS  = "POD_NAMESPACE"
	envOperatorSA     = "BLOODRAVEN_OPERATOR_SERVICE_ACCOUNT"
	envTopology       = "BLOODRAVEN_TOPOLOGY_DRIVER"
	envPodName        = "POD_NAME"
)

// options is the operator's whole configuration.
type options struct {
	metricsAddr      string
	metricsSecure    bool
	probeAddr        string
	auxAddr          string
	tlsAddr          string
	tlsCertDir       string
	leaderElection   bool
	leaderElectionID string
	leaderElectionNS string
	deployAPI        bool
	deployAudience   string
	// deployFairShare are the deployment API's per-identity limits.
	deployFairShare  deployapi.FairShare
	operatorIdentity string
	kubeQPS          float64
	kubeBurst        int
	shutdownTimeout  time.Duration
	// zap: controller-runtime's standard logging flags (--zap-log-level,
	// --zap-encoder, --zap-devel, --zap-stacktrace-level,
	// --zap-time-encoding).
	zap                 crzap.Options
	printVersionAndExit bool
	topologyDriver      string
	probeInterval       time.Duration
	// primaryProbeInterval is the prober's cadence for every active site
	// and every site seen dead; groupWorkers reconcile groups at once.
	primaryProbeInterval time.Duration
	groupWorkers         int
	// controllerQPS and controllerBurst are the group controller's own
	// client-side limiter (the deployment API keeps kubeQPS/kubeBurst).
	controllerQPS   float64
	controllerBurst int
	// leaderLabelPod is this replica's Pod (in leaderElectionNS), which it
	// labels with server.LeaderLabel; empty outside a cluster.
	leaderLabelPod string
	// recordKeySecret names the Secret, in leaderElectionNS, holding the
	// key of the deployment lease records' MACs.
	recordKeySecret string
	// leaseGuardPolicy names the ValidatingAdmissionPolicy (and its
	// binding) that keeps deployment Leases the operator's alone.
	leaseGuardPolicy string
	// watchNamespaces, when set, confines the operator to these namespaces
	// (the chart's namespaced install).
	watchNamespaces []string
}

// parseOptions reads flags from args with defaults from getenv.
func parseOptions(args []string, getenv func(string) string, out io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bloodraven", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		usageHeader(out)
		fs.PrintDefaults()
	}

	envStr := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	envBool := func(key string, def bool) (bool, error) {
		v := getenv(key)
		if v == "" {
			return def, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, fmt.Errorf("%s=%q: want true or false", key, v)
		}
		return b, nil
	}
	leDefault, err := envBool(envLeaderElection, true)
	if err != nil {
		return o, err
	}
	deployDefault, err := envBool(envDeployAPI, false)
	if err != nil {
		return o, err
	}

	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint.")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", false, "Serve /metrics over HTTPS with the certificate in --tls-cert-dir, only to callers whose bearer token passes a TokenReview and who may get the non-resource URL /metrics (a SubjectAccessReview).")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of /healthz and /readyz.")
	fs.StringVar(&o.auxAddr, "auxiliary-bind-address", ":8082", "Address of the plain-HTTP auxiliary status port. Never serves /deploy/.")
	fs.StringVar(&o.tlsAddr, "tls-bind-address", envStr(envTLSAddr, server.DefaultTLSAddr), "Address of the TLS listener for webhooks and /deploy/v1 (env "+envTLSAddr+").")
	fs.StringVar(&o.tlsCertDir, "tls-cert-dir", envStr(envTLSCertDir, "/etc/bloodraven/tls"), "Directory holding tls.crt and tls.key; reloaded on change (env "+envTLSCertDir+").")
	fs.BoolVar(&o.leaderElection, "leader-elect", leDefault, "Elect a leader through a Lease; only the leader reconciles and answers /deploy/v1 (env "+envLeaderElection+").")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "bloodraven-leader", "Name of the leader-election Lease (never a deployment lease).")
	fs.StringVar(&o.leaderElectionNS, "leader-election-namespace", getenv(envLeaderElectNS), "Namespace of the leader-election Lease (env "+envLeaderElectNS+"); required outside a cluster.")
	fs.BoolVar(&o.deployAPI, "deploy-api", deployDefault, "Serve the deployment API /deploy/v1 on the TLS listener (env "+envDeployAPI+").")
	fs.StringVar(&o.deployAudience, "deploy-audience", envStr(envDeployAudience, "bloodraven-deploy"), "Token audience required of deployment API callers (env "+envDeployAudience+").")
	fs.Float64Var(&o.deployFairShare.Rate, "deploy-api-rate-per-identity", deployapi.DefaultRatePerIdentity, "Deployment API requests per second one caller identity (ServiceAccount) may send; past it (and its burst) 429 rate_limited.")
	fs.IntVar(&o.deployFairShare.Burst, "deploy-api-burst-per-identity", deployapi.DefaultBurstPerIdentity, "Burst of --deploy-api-rate-per-identity.")
	fs.IntVar(&o.deployFairShare.InFlight, "deploy-api-inflight-per-identity", deployapi.DefaultInFlightPerIdentity, "Deployment API requests of one caller identity answered at once; past it 429 rate_limited.")
	fs.IntVar(&o.deployFairShare.Reads, "deploy-api-reads-per-identity", deployapi.DefaultReadsPerIdentity, "Authorization reads of the API server one caller identity has in flight at once; more wait in their request.")
	fs.IntVar(&o.deployFairShare.HeldGets, "deploy-api-held-gets-per-identity", deployapi.DefaultHeldGetsPerIdentity, "Lease GETs with Prefer: wait one caller identity may have held at once; past it they are answered at once.")
	fs.StringVar(&o.operatorIdentity, "operator-identity", envStr(envOperatorSA, ""), "The operator's own user name (system:serviceaccount:<ns>:<name>), allowed by the webhooks to write the fence (env "+envOperatorSA+").")
	fs.Float64Var(&o.kubeQPS, "kube-api-qps", 500, "Client-side QPS limit towards the API server; must allow a few hundred deployment renewals per second.")
	fs.IntVar(&o.kubeBurst, "kube-api-burst", 1000, "Client-side burst towards the API server.")
	fs.DurationVar(&o.shutdownTimeout, "graceful-shutdown-timeout", 30*time.Second, "Time given to runnables to stop on SIGTERM.")
	// JSON at info by default, time stamps to the nanosecond, stack traces
	// only for panics: what the operator logged before these flags.
	o.zap.TimeEncoder = zapcore.RFC3339NanoTimeEncoder
	o.zap.StacktraceLevel = zapcore.DPanicLevel
	o.zap.BindFlags(fs)
	fs.BoolVar(&o.printVersionAndExit, "version", false, "Print the version and exit.")
	fs.StringVar(&o.topologyDriver, "topology-driver", envStr(envTopology, "none"), "Data-plane driver: mysql (SQL to each site's MySQL/MariaDB; credentials from spec.credentialsSecretRef), none (report NoPrimary, never fail over) or simulated (in-memory sites; moves no data) (env "+envTopology+").")
	fs.DurationVar(&o.probeInterval, "probe-interval", 10*time.Second, "How often a quiet group's sites are probed.")
	fs.DurationVar(&o.primaryProbeInterval, "primary-probe-interval", time.Second, "How often the prober probes each group's active site, and each site it saw dead, in the background; a change wakes the group at once.")
	fs.IntVar(&o.groupWorkers, "group-workers", 64, "Groups reconciled at once.")
	fs.Float64Var(&o.controllerQPS, "controller-api-qps", 1000, "The group controller's own client-side QPS limit towards the API server (the deployment API has --kube-api-qps): a lost site costs about ten requests per group.")
	fs.IntVar(&o.controllerBurst, "controller-api-burst", 2000, "The group controller's own client-side burst.")
	fs.StringVar(&o.leaderLabelPod, "leader-label-pod", getenv(envPodName), "This replica's Pod, in the leader-election namespace: labelled "+server.LeaderLabel+"=true while it leads, false otherwise, so a Service can route the deployment API to the leader (env "+envPodName+"); empty: no label.")

	fs.StringVar(&o.recordKeySecret, "record-key-secret", "bloodraven-lease-record-key", "Secret in the operator's namespace (--leader-election-namespace) holding the key that authenticates deployment lease records; created at start when absent. Only the operator may read it.")
	fs.StringVar(&o.leaseGuardPolicy, "lease-guard-policy", "bloodraven-lease-guard", "Name of the ValidatingAdmissionPolicy and its binding that let only the operator write deployment Leases; its absence is reported at start and by bloodraven_lease_guard_policy_present.")
	fs.Func("watch-namespaces", "Comma-separated namespaces the operator confines itself to (caches, reconciles, the deployment API); empty: every namespace.", func(v string) error {
		for _, ns := range strings.Split(v, ",") {
			ns = strings.TrimSpace(ns)
			if ns == "" {
				continue
			}
			if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
				return fmt.Errorf("namespace %q: %s", ns, strings.Join(errs, "; "))
			}
			if !slices.Contains(o.watchNamespaces, ns) {
				o.watchNamespaces = append(o.watchNamespaces, ns)
			}
		}
		return nil
	})

	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if o.printVersionAndExit { // needs no configuration
		return o, nil
	}
	return o, o.validate()
}

func (o options) validate() error {
	if o.deployAPI && !o.leaderElection {
		return fmt.Errorf("--deploy-api needs --leader-elect: only the elected leader may answer /deploy/v1")
	}
	if o.operatorIdentity == "" {
		return fmt.Errorf("--operator-identity (env %s) is required: the webhooks let only this user, system:serviceaccount:<namespace>:<name>, move the fence", envOperatorSA)
	}
	switch o.topologyDriver {
	case "none", "simulated", "mysql":
	default:
		return fmt.Errorf("--topology-driver=%q: want none, simulated or mysql", o.topologyDriver)
	}
	if o.leaderElectionNS == "" {
		return fmt.Errorf("--leader-election-namespace (env %s) is required: the operator's namespace holds its leader-election Lease and its record key Secret", envLeaderElectNS)
	}
	if o.recordKeySecret == "" {
		return fmt.Errorf("--record-key-secret must not be empty")
	}
	if o.deployAudience == "" {
		return fmt.Errorf("--deploy-audience must not be empty")
	}
	if f := o.deployFairShare; f.Rate <= 0 || f.Burst < 1 || f.InFlight < 1 || f.HeldGets < 1 || f.Reads < 1 {
		return fmt.Errorf("--deploy-api-rate-per-identity must be above 0, and --deploy-api-burst-per-identity, --deploy-api-inflight-per-identity, --deploy-api-held-gets-per-identity and --deploy-api-reads-per-identity at least 1")
	}
	if o.kubeQPS < 100 {
		return fmt.Errorf("--kube-api-qps=%v is too low: the deployment API needs at least 100", o.kubeQPS)
	}
	if _, err := server.TLSListenerOptions(o.tlsAddr, o.tlsCertDir); err != nil {
		return err
	}
	return nil
}
