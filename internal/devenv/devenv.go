package devenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/shipstream/bloodraven/internal/mariadblocal"
	"github.com/shipstream/bloodraven/internal/scene"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
)

// Names of the playground's objects.
const (
	OperatorNamespace      = "bloodraven-system"
	OperatorServiceAccount = "bloodraven"
	PlaygroundNamespace    = "playground"
	GroupName              = "playground"
	DatabaseName           = "counter-app"
	DeployServiceAccount   = "deploy"
	DeployAudience         = scene.DeployAudience
)

// ErrAlreadyRunning is returned by Up when another playground holds the state
// directory.
var ErrAlreadyRunning = errors.New("a playground is already running in this state directory")

// Config says where the playground keeps its state and which ports it uses.
type Config struct {
	// Root is the project checkout (for config/ and bin/).
	Root string
	// StateDir holds everything the playground writes; default Root/.dev.
	StateDir string
	// OperatorBinary is the operator to run; default Root/bin/bloodraven.
	OperatorBinary string
	// Listener addresses of the operator. Defaults :8443, :8082, :8080, :8081.
	TLSAddr, AuxAddr, MetricsAddr, ProbeAddr string
	// WebhookAddr is where the API server calls the webhooks; default
	// 127.0.0.1 at TLSAddr's port. A test sets it to a fault proxy
	// (internal/faultproxy) in front of the TLS listener, which it must
	// start before Up, to take the webhooks away as a lost replica would.
	WebhookAddr string
	// MySQLPorts are the loopback ports of the iad and pdx MariaDB sites.
	// Default 13306 and 13307.
	MySQLPorts [2]int
	// SitePorts are the ports the group's spec names for iad and pdx;
	// default MySQLPorts. A test sets them to fault proxies
	// (internal/faultproxy) in front of the MariaDB servers, which it must
	// start before Up. The topology driver points replication at the
	// spec's addresses at every promotion, bootstrap included, so
	// replication goes through the proxies too, as it would through the
	// network they simulate: a refused primary also stops its replicas.
	SitePorts [2]int
	// Log receives progress lines; default io.Discard.
	Log io.Writer
	// WatchNamespaces, when set, starts the operator confined to these
	// namespaces (--watch-namespaces: the chart's namespaced install).
	WatchNamespaces []string
	// OperatorRBAC, when set, is created instead of the operator's
	// generated ClusterRole and its binding (a test passes the chart's
	// namespaced rendering); the namespaces of its Roles are created first.
	OperatorRBAC []client.Object
}

// Paths are the fixed locations of what a user needs.
type Paths struct {
	Kubeconfig         string // cluster-admin kubeconfig for the user
	CACert             string // CA of the TLS listener
	DeployToken        string // token of playground/deploy, audience bloodraven-deploy
	OperatorKubeconfig string // the operator's own identity
	OperatorLog        string
	OperatorPID        string // pid of the running operator (make dev-restart-operator)
	TLSDir             string
}

// PathsFor returns the fixed paths under stateDir.
func PathsFor(stateDir string) Paths {
	return Paths{
		Kubeconfig:         filepath.Join(stateDir, "kubeconfig"),
		CACert:             filepath.Join(stateDir, "ca.crt"),
		DeployToken:        filepath.Join(stateDir, "deploy.token"),
		OperatorKubeconfig: filepath.Join(stateDir, "operator.kubeconfig"),
		OperatorLog:        filepath.Join(stateDir, "operator.log"),
		OperatorPID:        filepath.Join(stateDir, "operator.pid"),
		TLSDir:             filepath.Join(stateDir, "tls"),
	}
}

// Playground is a running playground.
type Playground struct {
	cfg      Config
	Paths    Paths
	lock     *os.File
	env      *envtest.Environment
	operator *Operator // as started; sup.current after restarts
	sup      *supervisor
	// Sites are the playground's MariaDB servers, iad then pdx.
	Sites []*mariadblocal.Server
	// AdminConfig is the cluster-admin REST config.
	AdminConfig *rest.Config
}

func (c *Config) defaults() {
	if c.StateDir == "" {
		c.StateDir = filepath.Join(c.Root, ".dev")
	}
	if c.OperatorBinary == "" {
		c.OperatorBinary = filepath.Join(c.Root, "bin", "bloodraven")
	}
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.TLSAddr, ":8443")
	def(&c.AuxAddr, ":8082")
	def(&c.MetricsAddr, ":8080")
	def(&c.ProbeAddr, ":8081")
	if c.Log == nil {
		c.Log = io.Discard
	}
	if c.MySQLPorts == [2]int{} {
		c.MySQLPorts = [2]int{13306, 13307}
	}
	if c.SitePorts == [2]int{} {
		c.SitePorts = c.MySQLPorts
	}
}

func (p *Playground) logf(format string, args ...any) { fmt.Fprintf(p.cfg.Log, format+"\n", args...) }

// Up starts the playground. On error everything it started is stopped again.
func Up(ctx context.Context, cfg Config) (_ *Playground, err error) {
	cfg.defaults()
	p := &Playground{cfg: cfg, Paths: PathsFor(cfg.StateDir)}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	if err := p.acquireLock(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = p.Down()
		}
	}()
	for _, addr := range []string{cfg.TLSAddr, cfg.AuxAddr, cfg.MetricsAddr, cfg.ProbeAddr,
		fmt.Sprintf("127.0.0.1:%d", cfg.MySQLPorts[0]), fmt.Sprintf("127.0.0.1:%d", cfg.MySQLPorts[1])} {
		if err := portFree(addr); err != nil {
			return nil, err
		}
	}
	if err := mariadblocal.Available(); err != nil {
		return nil, err
	}
	if err := p.resetState(); err != nil {
		return nil, err
	}
	if err := p.startSites(ctx); err != nil {
		return nil, err
	}
	if err := p.startControlPlane(); err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(p.AdminConfig)
	if err != nil {
		return nil, fmt.Errorf("clientset: %w", err)
	}
	c, err := client.New(p.AdminConfig, client.Options{Scheme: bloodravenscheme.New()})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if err := p.installOperatorIdentity(ctx, c, kube); err != nil {
		return nil, err
	}
	if err := p.installLeaseGuard(ctx, c); err != nil {
		return nil, err
	}
	if err := p.writeServingCertificate(); err != nil {
		return nil, err
	}
	if err := p.startOperator(ctx); err != nil {
		return nil, err
	}
	p.supervise(p.operator)
	if err := p.installWebhooks(ctx, c); err != nil {
		return nil, err
	}
	if err := p.createScene(ctx, c, kube); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Playground) acquireLock() error {
	f, err := os.OpenFile(filepath.Join(p.cfg.StateDir, ".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid, _ := io.ReadAll(f)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("%w (pid %s); stop it with Ctrl-C in its terminal", ErrAlreadyRunning, strings.TrimSpace(string(pid)))
		}
		return fmt.Errorf("lock: %w", err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(fmt.Sprintf("%d\n", os.Getpid())), 0)
	p.lock = f
	return nil
}

func portFree(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("port %s is in use (another operator or playground?): %w", addr, err)
	}
	return ln.Close()
}

// resetState removes what an earlier run left, except the lock.
func (p *Playground) resetState() error {
	entries, err := os.ReadDir(p.cfg.StateDir)
	if err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	for _, e := range entries {
		if e.Name() == ".lock" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(p.cfg.StateDir, e.Name())); err != nil {
			return fmt.Errorf("reset state: %w", err)
		}
	}
	return nil
}

// Down stops the operator, then the control plane, then releases the lock.
func (p *Playground) Down() error {
	var errs []error
	p.stopSupervisor()
	for _, s := range p.Sites {
		s.Stop()
	}
	if p.env != nil {
		if err := p.env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop control plane: %w", err))
		}
	}
	if p.lock != nil {
		_ = p.lock.Close() // releases the flock
	}
	return errors.Join(errs...)
}

func loopback(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || host == "0.0.0.0" || host == "::" {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

func ok(hc *http.Client, url string) bool {
	resp, err := hc.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func bodyContains(hc *http.Client, url, s string) bool {
	resp, err := hc.Get(url)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return strings.Contains(string(b), s)
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
