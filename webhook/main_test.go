package webhook

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/yaml"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/faultproxy"
	"github.com/shipstream/bloodraven/internal/testenv"
)

// The operator's identity in these tests, and the fence guard's name.
const (
	operatorIdentity = "system:serviceaccount:bloodraven-system:bloodraven"
	fenceGuardName   = "bloodraven-fence-guard"
)

var (
	env *testenv.Env
	// webhookProxy stands between the API server and the webhook server:
	// it passes everything, except while a test takes the webhooks away
	// (faultproxy.BlackHole), as a replica lost with its node does.
	webhookProxy *faultproxy.Proxy
)

// TestMain installs what the chart and the playground install: the generated
// webhook configuration with the operator exempted (ExemptTheOperator),
// pointed at webhookProxy, and the fence guard (FenceGuard).
func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	cfg, err := webhookConfiguration()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The webhook server's port is held from here on; the proxy in front
	// of it is what the API server calls.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer ln.Close()
	if webhookProxy, err = faultproxy.New(ln.Addr().String()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer webhookProxy.Close()
	opts := testenv.Options{Webhooks: envtest.WebhookInstallOptions{
		LocalServingHost:   "127.0.0.1",
		LocalServingPort:   webhookProxy.Port(),
		ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{cfg},
	}}
	return testenv.MainWithOptions(m, &env, opts, serveWebhooks(ln), installFenceGuard)
}

// webhookConfiguration is config/webhook (generated from the markers) with
// the operator exempted, as the playground registers it.
func webhookConfiguration() (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "webhook", "manifests.yaml"))
	if err != nil {
		return nil, err
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := yaml.UnmarshalStrict(data, cfg); err != nil {
		return nil, fmt.Errorf("config/webhook: %w", err)
	}
	ExemptTheOperator(cfg, operatorIdentity)
	return cfg, nil
}

// serveWebhooks serves the webhooks on ln with envtest's serving
// certificate, and waits until they answer through the proxy.
func serveWebhooks(ln net.Listener) func(*testenv.Env) (func(), error) {
	return func(e *testenv.Env) (func(), error) {
		dir := e.Environment.WebhookInstallOptions.LocalServingCertDir
		cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
		if err != nil {
			return nil, fmt.Errorf("serving certificate: %w", err)
		}
		srv := crwebhook.NewServer(crwebhook.Options{})
		Register(srv, e.Scheme, operatorIdentity)
		hs := &http.Server{Handler: srv.WebhookMux(), ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: log.New(io.Discard, "", 0)} // TLS handshakes the black hole cut off are expected
		go func() {
			_ = hs.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
		}()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			conn, err := tls.Dial("tcp", webhookProxy.Addr(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // readiness probe only
			if err == nil {
				conn.Close()
				break
			}
			if time.Now().After(deadline) {
				hs.Close()
				return nil, fmt.Errorf("webhook server not serving: %w", err)
			}
		}
		return func() { _ = hs.Close() }, nil
	}
}

// installFenceGuard installs the fence guard and waits until the API server
// enforces it: a dry-run skip of the generation by the operator is refused.
func installFenceGuard(e *testenv.Env) (func(), error) {
	ctx := context.Background()
	policy, binding := FenceGuard(FenceGuardOptions{Name: fenceGuardName, OperatorUsername: operatorIdentity})
	for _, o := range []client.Object{policy, binding} {
		if err := e.Client.Create(ctx, o); err != nil {
			return nil, fmt.Errorf("create fence guard %T: %w", o, err)
		}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "fence-guard-probe-"}}
	if err := e.Client.Create(ctx, ns); err != nil {
		return nil, err
	}
	g := &bloodravenv1alpha1.MysqlFailoverGroup{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns.Name},
		Spec: bloodravenv1alpha1.MysqlFailoverGroupSpec{Sites: []bloodravenv1alpha1.Site{{Name: "iad"}}}}
	if err := e.Client.Create(ctx, g); err != nil {
		return nil, fmt.Errorf("fence guard probe: %w", err)
	}
	opCfg := rest.CopyConfig(e.Config)
	opCfg.Impersonate = rest.ImpersonationConfig{UserName: operatorIdentity, Groups: []string{"system:masters"}}
	operator, err := client.New(opCfg, client.Options{Scheme: e.Scheme})
	if err != nil {
		return nil, err
	}
	skip := client.RawPatch(types.MergePatchType, []byte(`{"status":{"topologyGeneration":2,"activeSite":"iad"}}`))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := operator.Status().Patch(ctx, g.DeepCopy(), skip, client.DryRunAll)
		if err != nil && strings.Contains(err.Error(), "moves by exactly one") {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("fence guard probe: %w", err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the fence guard was not enforced within 30 s")
		}
	}
}
