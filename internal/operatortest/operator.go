// Package operatortest runs the real operator in the test process, for
// tests of clients of the deployment API: the MysqlFailoverGroup controller
// under a controller-runtime manager (simulated sites, package
// topology/memory), and the deployment API served over TLS by a certificate
// of a fresh CA, both against the envtest kube-apiserver of package testenv,
// with real TokenRequest tokens. Each Operator owns two fresh namespaces and
// reconciles only its own: several run side by side in one process.
//
// What is simulated, and says so: the data plane (memory.Driver moves no
// data). Everything that touches the API server is real.
package operatortest

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/deployapi"
	"github.com/shipstream/bloodraven/internal/pki"
	"github.com/shipstream/bloodraven/internal/testenv"
	"github.com/shipstream/bloodraven/operator"
	"github.com/shipstream/bloodraven/store/leasestore"
	"github.com/shipstream/bloodraven/topology/memory"
)

// Names of the scene.
const (
	GroupName      = "orders"
	Instance       = "orders-app"
	ServiceAccount = "deploy"
	Audience       = "bloodraven-deploy"
)

// Options tune Start.
type Options struct {
	// Skew is added to the operator's clock: the server's clock runs Skew
	// ahead of the test's.
	Skew time.Duration
	// Wrap, when set, wraps the deployment API's handler (to observe or
	// drop requests).
	Wrap func(http.Handler) http.Handler
	// FailureDetectionSeconds of the group; default 5 (the minimum).
	FailureDetectionSeconds int32
	// Quiet discards the operator's logs even under -v (a load test would
	// log a line per request).
	Quiet bool
	// IsLeader, when set, says whether the first replica's deployment API
	// leads (default: always). See Replica for a second one.
	IsLeader func() bool
	// ProbeInterval of the controller; default 1 s.
	ProbeInterval time.Duration
	// Workers of the group controller; default controllers.DefaultWorkers.
	Workers int
	// QPS and Burst of the operator's client; default the operator's own
	// defaults (500, 1000).
	QPS   float32
	Burst int
	// FairShare are the deployment API's per-identity limits (zero fields:
	// the operator's defaults). Every client of the scene is one identity
	// (the deploy ServiceAccount), so a load test sets them above the load
	// it drives: the limiter still runs on every request.
	FairShare deployapi.FairShare
}

// Operator is a running in-process operator and its scene: one group with
// sites iad and pdx (iad primary), one MysqlDatabase naming the deploy
// ServiceAccount of ClientNamespace as its client.
type Operator struct {
	Env *testenv.Env
	// URL is https://127.0.0.1:<port>, served with a certificate for
	// 127.0.0.1 and localhost signed by the CA in CAFile.
	URL, CAFile string
	// Namespace holds the group and the database; ClientNamespace the
	// deploy ServiceAccount.
	Namespace, ClientNamespace string
	Driver                     *memory.Driver
	Clock                      clock.PassiveClock
	// RecordKey is the key the operator seals lease records with.
	RecordKey *leasestore.RecordKey

	t   testing.TB
	dir string
	// newAPI builds another deployment API replica over the same caches.
	newAPI func(isLeader func() bool) http.Handler
	cert   tls.Certificate
}

// skewed is the real clock plus an offset.
type skewed struct {
	clock.RealClock
	d time.Duration
}

func (c skewed) Now() time.Time                  { return c.RealClock.Now().Add(c.d) }
func (c skewed) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Start brings up the scene and the operator, and waits for the group's
// bootstrap (generation 1, iad active). Everything stops at the end of t.
func Start(t testing.TB, env *testenv.Env, opts Options) *Operator {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if opts.FailureDetectionSeconds == 0 {
		opts.FailureDetectionSeconds = 5
	}
	globalLogger.Do(func() { ctrl.SetLogger(logr.Discard()) }) // client-go logs through it
	o := &Operator{Env: env, t: t, dir: t.TempDir(), Clock: skewed{d: opts.Skew}, Driver: memory.New()}
	o.Namespace = env.Namespace(t)
	o.ClientNamespace = env.Namespace(t)

	g := &bloodravenv1alpha1.MysqlFailoverGroup{
		ObjectMeta: metav1.ObjectMeta{Name: GroupName, Namespace: o.Namespace},
		Spec: bloodravenv1alpha1.MysqlFailoverGroupSpec{Sites: []bloodravenv1alpha1.Site{{Name: "iad"}, {Name: "pdx"}},
			FailureDetectionSeconds: opts.FailureDetectionSeconds},
	}
	must(t, env.Client.Create(ctx, g))
	o.Driver.Seed(g, "iad")
	must(t, env.Client.Create(ctx, &bloodravenv1alpha1.MysqlDatabase{
		ObjectMeta: metav1.ObjectMeta{Name: Instance, Namespace: o.Namespace},
		Spec: bloodravenv1alpha1.MysqlDatabaseSpec{GroupRef: bloodravenv1alpha1.GroupReference{Name: GroupName}, DatabaseName: "orders",
			DeploymentClients: []bloodravenv1alpha1.DeploymentClient{{Namespace: o.ClientNamespace, ServiceAccount: ServiceAccount}}},
	}))
	must(t, env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: ServiceAccount, Namespace: o.ClientNamespace}}))

	if opts.ProbeInterval == 0 {
		opts.ProbeInterval = time.Second
	}
	cfg := operator.RESTConfig(env.Config)
	cfg.QPS, cfg.Burst = 500, 1000
	if opts.QPS > 0 {
		cfg.QPS, cfg.Burst = opts.QPS, opts.Burst
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 env.Scheme,
		Cache:                  operator.CacheOptions(o.Namespace),
		MapperProvider:         operator.MapperProvider,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Logger:                 quiet(t, opts.Quiet),
	})
	must(t, err)
	o.RecordKey, err = leasestore.LoadRecordKey(ctx, env.Client, o.Namespace, "bloodraven-lease-record-key", o.Namespace)
	must(t, err)
	parts, err := operator.New(mgr, operator.Config{
		Driver: o.Driver, Clock: skewed{d: opts.Skew}, Log: quiet(t, opts.Quiet), Metrics: prometheus.NewRegistry(),
		RecordKey: o.RecordKey, ProbeInterval: opts.ProbeInterval, Workers: opts.Workers,
		DeployAPI: &operator.DeployAPIConfig{Kube: env.Kube, FairShare: opts.FairShare},
	})
	must(t, err)
	o.newAPI = func(isLeader func() bool) http.Handler {
		api, err := parts.NewDeployAPI(isLeader, prometheus.NewRegistry())
		must(t, err)
		var h http.Handler = api.Handler()
		if opts.Wrap != nil {
			h = opts.Wrap(h)
		}
		return h
	}
	if opts.IsLeader == nil {
		opts.IsLeader = func() bool { return true }
	}
	o.serve(o.newAPI(opts.IsLeader))

	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("operator did not stop")
		}
	})
	o.WaitGeneration(1, 30*time.Second)
	return o
}

// quiet logs only when -v is given (not -json: make test's reporter keeps
// only failed tests' output, and the operator's log would cost every test
// its volume).
func quiet(t testing.TB, discard bool) logr.Logger {
	if tt, ok := t.(*testing.T); ok && plainVerbose() && !discard {
		return testr.New(tt)
	}
	return logr.Discard()
}

func (o *Operator) serve(h http.Handler) {
	t := o.t
	ca, err := pki.NewCA("operatortest CA", time.Now(), 24*time.Hour)
	must(t, err)
	pair, err := ca.Issue("bloodraven", []string{"127.0.0.1", "localhost"}, time.Now(), 24*time.Hour)
	must(t, err)
	o.cert, err = tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	must(t, err)
	o.CAFile = filepath.Join(o.dir, "ca.crt")
	must(t, os.WriteFile(o.CAFile, ca.CertPEM, 0o644))
	o.URL = "https://" + o.listen(h)
}

// listen serves h over TLS with the scene's certificate on a fresh port of
// 127.0.0.1 and returns its address.
func (o *Operator) listen(h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(o.t, err)
	srv := &http.Server{Handler: h, TLSConfig: &tls.Config{Certificates: []tls.Certificate{o.cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	o.t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// Replica serves a second deployment API replica of the same operator (its
// caches and Lease store; its own token cache and metrics), leading when
// isLeader says so, with the scene's certificate. It returns its address
// (host:port), for a balancer in front of both.
func (o *Operator) Replica(isLeader func() bool) string {
	o.t.Helper()
	return o.listen(o.newAPI(isLeader))
}

// Addr is the first replica's address (host:port).
func (o *Operator) Addr() string { return strings.TrimPrefix(o.URL, "https://") }

// Token is a real TokenRequest token of the deploy ServiceAccount for the
// deployment API's audience, bound to a fresh Secret: deleting that Secret
// (Unbind) invalidates this token alone.
func (o *Operator) Token() (token, secret string) {
	o.t.Helper()
	ctx := context.Background()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{GenerateName: "token-binding-", Namespace: o.ClientNamespace}}
	must(o.t, o.Env.Client.Create(ctx, sec))
	tr, err := o.Env.Kube.CoreV1().ServiceAccounts(o.ClientNamespace).CreateToken(ctx, ServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences: []string{Audience}, ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: sec.Name, UID: sec.UID},
		},
	}, metav1.CreateOptions{})
	must(o.t, err)
	return tr.Status.Token, sec.Name
}

// Unbind deletes a token's binding Secret: the API server stops accepting
// that token.
func (o *Operator) Unbind(secret string) {
	o.t.Helper()
	must(o.t, client.IgnoreNotFound(o.Env.Client.Delete(context.Background(),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret, Namespace: o.ClientNamespace}})))
}

var (
	tokenFiles   atomic.Int64
	globalLogger sync.Once
)

// TokenFile writes a fresh token to a new file and returns its path.
func (o *Operator) TokenFile() string {
	o.t.Helper()
	tok, _ := o.Token()
	path := filepath.Join(o.dir, fmt.Sprintf("token-%d", tokenFiles.Add(1)))
	must(o.t, os.WriteFile(path, []byte(tok), 0o600))
	return path
}

// Group reads the group.
func (o *Operator) Group() *bloodravenv1alpha1.MysqlFailoverGroup {
	o.t.Helper()
	g := &bloodravenv1alpha1.MysqlFailoverGroup{}
	must(o.t, o.Env.Client.Get(context.Background(), client.ObjectKey{Namespace: o.Namespace, Name: GroupName}, g))
	return g
}

// WaitGeneration waits until the group's topology generation is gen.
func (o *Operator) WaitGeneration(gen int64, timeout time.Duration) *bloodravenv1alpha1.MysqlFailoverGroup {
	o.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		g := o.Group()
		if g.Status.TopologyGeneration == gen {
			return g
		}
		if time.Now().After(deadline) {
			o.t.Fatalf("topology generation is %d after %s, want %d (status %+v)", g.Status.TopologyGeneration, timeout, gen, g.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// KillPrimary makes the active site unreachable: after the group's
// detection budget the controller fails over to the other site, bumps the
// generation and revokes every lease (topology_changed).
func (o *Operator) KillPrimary() {
	o.t.Helper()
	g := o.Group()
	o.Driver.Kill(g, g.Status.ActiveSite)
}

// RevokeAll sets the revoke annotation, as an administrator would.
func (o *Operator) RevokeAll() {
	o.t.Helper()
	g := o.Group()
	patch := client.MergeFrom(g.DeepCopy())
	if g.Annotations == nil {
		g.Annotations = map[string]string{}
	}
	g.Annotations[bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation] = "true"
	must(o.t, o.Env.Client.Patch(context.Background(), g, patch))
}

// SetTransition writes an unconfirmed transition into the group's status,
// as the operator does before it promotes: from then on every grant and
// renewal answers 423 unstable. The controller acts on it (it resumes or
// rolls the transition back), so the scene's sites are made unreachable
// first: the controller can then only wait, and the 423s last.
func (o *Operator) SetTransition() {
	o.t.Helper()
	g := o.Group()
	for _, s := range g.Spec.Sites {
		o.Driver.Kill(g, s.Name)
	}
	// The controller writes the status too: retry on a conflict.
	must(o.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		g := o.Group()
		g.Status.Transition = &bloodravenv1alpha1.TopologyTransition{Operation: "PlannedFailover", TargetSite: "pdx",
			Generation: g.Status.TopologyGeneration + 1, StartedAt: metav1.Now()}
		return o.Env.Client.Status().Update(context.Background(), g)
	}))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// NewCA returns the PEM of a fresh CA that signed nothing.
func NewCA(t testing.TB) []byte {
	t.Helper()
	ca, err := pki.NewCA("foreign CA", time.Now(), time.Hour)
	must(t, err)
	return ca.CertPEM
}

// plainVerbose: -test.v=true, not test2json's -test.v=test2json (go test
// -json), which testing.Verbose also reports.
func plainVerbose() bool {
	f := flag.Lookup("test.v")
	return testing.Verbose() && f != nil && f.Value.String() == "true"
}
