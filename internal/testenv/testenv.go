package testenv

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/shipstream/bloodraven/internal/childproc"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
)

// Env is a running control plane and an administrator's clients for it.
type Env struct {
	Environment *envtest.Environment
	// Config is a cluster-admin (system:masters) REST config.
	Config *rest.Config
	// Client is a controller-runtime client for Config, with the project's
	// types in its scheme. It talks to the API server directly (no cache).
	Client client.Client
	// Kube is a client-go clientset for Config.
	Kube   kubernetes.Interface
	Scheme *kruntime.Scheme
	// launchers holds the kube-apiserver and etcd launchers (ControlPlane).
	launchers string
}

// Options tune Start.
type Options struct {
	// Webhooks, when non-empty, are installed through envtest's webhook
	// install options.
	Webhooks envtest.WebhookInstallOptions
}

// ShortTempDir is a directory removed when t ends, with a short path: for
// a TMPDIR of a process that makes a unix socket in it (`deploy run`'s
// control socket), where t.TempDir()'s path, which carries the test's name,
// can pass a socket path's 108 bytes. A process the test kills -9 leaves
// its private directory there, not in the machine's /tmp.
func ShortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "brtest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// RepoRoot is the root of the project checkout.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
}

// Start starts kube-apiserver and etcd and installs the CRDs.
func Start(opts Options) (_ *Env, err error) {
	root := RepoRoot()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(root, "bin")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			return nil, fmt.Errorf("%s not found in %s: run `make tools` (it builds the control plane from the Go module proxy)", b, assets)
		}
	}
	scheme := bloodravenscheme.New()
	launchers, err := os.MkdirTemp("", "bloodraven-controlplane-")
	if err != nil {
		return nil, fmt.Errorf("control plane launchers: %w", err)
	}
	e := &Env{Scheme: scheme, launchers: launchers}
	defer func() {
		if err != nil {
			_ = e.Stop()
		}
	}()
	cp, err := ControlPlane(assets, launchers)
	if err != nil {
		return nil, err
	}
	e.Environment = &envtest.Environment{
		Scheme:                   scheme,
		CRDDirectoryPaths:        []string{filepath.Join(root, "config", "crd")},
		ErrorIfCRDPathMissing:    true,
		BinaryAssetsDirectory:    assets,
		WebhookInstallOptions:    opts.Webhooks,
		ControlPlaneStartTimeout: 60 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
		ControlPlane:             cp,
	}
	if err := childproc.Do(func() (err error) { e.Config, err = e.Environment.Start(); return err }); err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	// The API server behind the deployment API must not be throttled by the
	// client; tests use the same limits as the operator.
	e.Config.QPS, e.Config.Burst = 500, 1000
	if e.Client, err = client.New(e.Config, client.Options{Scheme: scheme}); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if e.Kube, err = kubernetes.NewForConfig(e.Config); err != nil {
		return nil, fmt.Errorf("clientset: %w", err)
	}
	return e, nil
}

// Stop stops the control plane (what of it was started).
func (e *Env) Stop() error {
	defer os.RemoveAll(e.launchers)
	if e.Environment == nil {
		return nil
	}
	return e.Environment.Stop()
}

// ControlPlane returns envtest's kube-apiserver and etcd for the binaries in
// assets, each started through a launcher written into dir that makes it die
// with this process (internal/childproc): a test binary that panics or is
// killed leaves no control plane behind. Start it inside childproc.Do.
func ControlPlane(assets, dir string) (envtest.ControlPlane, error) {
	api, err := childproc.Wrap(dir, filepath.Join(assets, "kube-apiserver"))
	if err != nil {
		return envtest.ControlPlane{}, err
	}
	etcd, err := childproc.Wrap(dir, filepath.Join(assets, "etcd"))
	if err != nil {
		return envtest.ControlPlane{}, err
	}
	return envtest.ControlPlane{APIServer: &envtest.APIServer{Path: api}, Etcd: &envtest.Etcd{Path: etcd}}, nil
}

// Main is a TestMain body: it starts the control plane, stores it in *env,
// runs setup hooks (each may return a cleanup), runs the tests and stops
// everything.
func Main(m *testing.M, env **Env, setup ...func(*Env) (func(), error)) int {
	return MainWithOptions(m, env, Options{}, setup...)
}

// MainWithOptions is Main with start options (webhooks to install).
func MainWithOptions(m *testing.M, env **Env, opts Options, setup ...func(*Env) (func(), error)) int {
	if fuzzing() {
		// `go test -fuzz` runs no envtest-backed test (it is used with
		// -run='^$'); its workers re-run TestMain and must not each start a
		// control plane.
		return m.Run()
	}
	e, err := Start(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		return 1
	}
	*env = e
	var cleanups []func()
	stop := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
		if err := e.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "testenv: stop:", err)
		}
	}
	for _, s := range setup {
		cleanup, err := s(e)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testenv: setup:", err)
			stop()
			return 1
		}
		if cleanup != nil {
			cleanups = append(cleanups, cleanup)
		}
	}
	code := m.Run()
	stop()
	return code
}

func fuzzing() bool {
	if !flag.Parsed() {
		flag.Parse()
	}
	for _, name := range []string{"test.fuzz", "test.fuzzworker"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" && f.Value.String() != "false" {
			return true
		}
	}
	return false
}

// Namespace creates a fresh namespace for t and returns its name.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	base := strings.ToLower(strings.NewReplacer("/", "-", "_", "-", " ", "-").Replace(t.Name()))
	if len(base) > 40 {
		base = base[:40]
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: strings.Trim(base, "-") + "-"}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return ns.Name
}

// Ports handed out by FreeAddr come from below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range starts at 32768 by default), so that no
// outgoing connection or ":0" listener of a concurrently running test
// process can take a port between the moment it is handed out and the
// moment it is bound. Each port is handed out once per process, and once
// among all test processes running at the same time: `go test ./...` runs
// packages side by side, and a port handed out to one but not yet bound by
// its server (a MariaDB or an operator still starting) looks free to the
// others. A port is reserved with an flock on a file named after it, held
// until this process exits (the kernel releases it even after a crash).
const (
	freePortMin = 20000
	freePortMax = 32000
)

var (
	freeMu    sync.Mutex
	handedOut = map[int]*os.File{}
)

// reserve takes the machine-wide reservation of port, or reports that
// another test process holds it.
func reserve(port int) (*os.File, bool) {
	dir := filepath.Join(os.TempDir(), "bloodraven-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, true // no reservations possible: rely on the listen check
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return f, true
}

// FreeAddr returns a free 127.0.0.1:port outside the ephemeral range.
func FreeAddr(t testing.TB) string {
	t.Helper()
	freeMu.Lock()
	defer freeMu.Unlock()
	for i := 0; i < 1000; i++ {
		port := freePortMin + rand.IntN(freePortMax-freePortMin)
		if _, ok := handedOut[port]; ok {
			continue
		}
		lock, ok := reserve(port)
		if !ok {
			continue // another test process has it
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			if lock != nil {
				lock.Close()
			}
			continue
		}
		ln.Close()
		handedOut[port] = lock // held open: the reservation lasts as long as this process
		return ln.Addr().String()
	}
	t.Fatal("no free port found")
	return ""
}

// FreePort is FreeAddr's port.
func FreePort(t testing.TB) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(FreeAddr(t))
	n, _ := strconv.Atoi(port)
	return n
}

// User adds an API server user with the given groups and returns a
// controller-runtime client acting as that user.
func (e *Env) User(t testing.TB, name string, groups ...string) (client.Client, *rest.Config) {
	t.Helper()
	u, err := e.Environment.AddUser(envtest.User{Name: name, Groups: groups}, e.Config)
	if err != nil {
		t.Fatalf("add user %s: %v", name, err)
	}
	cfg := rest.CopyConfig(u.Config())
	c, err := client.New(cfg, client.Options{Scheme: e.Scheme})
	if err != nil {
		t.Fatalf("client for %s: %v", name, err)
	}
	return c, cfg
}

// WaitFor polls cond every 100 ms and fails the test after timeout.
func WaitFor(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("condition not met within %v", timeout)
	}
}
