package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/shipstream/bloodraven/internal/childproc"
)

// ErrAlreadyRunning is returned by Up while another node runs on this
// machine (make cluster, or another test binary's node).
var ErrAlreadyRunning = errors.New("a node is already running on this machine (make cluster, or a node test); one node runs at a time")

// lockPath is outside RunDir, which Teardown removes.
const lockPath = "/run/bloodraven-node.lock"

// Config says where the node keeps its files and where it logs progress.
type Config struct {
	Layout
	// Ports; zero means DefaultPorts.
	Ports Ports
	// Images are docker-archive tarballs (make image's bin/image/*.tar) to
	// import, each then also tagged with the names in Tags.
	Images []Image
	// Log receives progress lines; default io.Discard.
	Log io.Writer
}

// Image is a tarball to import and the extra names to give it.
type Image struct {
	Tarball string
	Tags    map[string]string // existing name -> extra name
}

// Node is a running node.
type Node struct {
	cfg   Config
	lock  *os.File
	procs []*proc
	// Admin is a cluster-admin (system:masters) client configuration.
	Admin *rest.Config
	// Kube is a clientset of Admin.
	Kube kubernetes.Interface
	pki  *clusterPKI
}

func (n *Node) logf(format string, args ...any) {
	fmt.Fprintf(n.cfg.Log, format+"\n", args...)
}

// Up brings a node up from empty state: it stops and cleans whatever a
// previous node on this machine left, prepares the host, and starts etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, containerd,
// the kubelet, kube-proxy, kube-router (NetworkPolicy only) and CoreDNS.
// It returns once the Node is Ready and cluster DNS answers. On error
// everything it started is stopped and the host cleaned.
func Up(ctx context.Context, cfg Config) (_ *Node, err error) {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.Ports == (Ports{}) {
		cfg.Ports = DefaultPorts
	}
	if err := checkSocketPaths(ContainerdSocket(), filepath.Join(KubeletRootDir(), "pod-resources", "kubelet.sock"),
		filepath.Join(KubeletRootDir(), "plugins_registry", "x.sock")); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("node lock: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, ErrAlreadyRunning
	}
	n := &Node{cfg: cfg, lock: lock}
	defer func() {
		if err != nil {
			_ = n.Down()
		}
	}()
	n.logf(">> cleaning what an earlier node left on this machine")
	if err := Teardown(cfg.Layout); err != nil {
		return nil, fmt.Errorf("clean the host before starting: %w", err)
	}
	if err := os.RemoveAll(cfg.StateDir); err != nil {
		return nil, fmt.Errorf("clear %s: %w", cfg.StateDir, err)
	}
	if err := n.writeFiles(); err != nil {
		return nil, err
	}
	n.logf(">> preparing the host: bridge %s (%s), kernel settings, cgroup %s", Bridge, NodeIP, CgroupRoot)
	if err := Prepare(cfg.Layout); err != nil {
		return nil, err
	}
	steps := []struct {
		what string
		fn   func(context.Context) error
	}{
		{"etcd", n.startEtcd},
		{"kube-apiserver", n.startAPIServer},
		{"cluster roles", n.applyRBAC},
		{"kube-controller-manager and kube-scheduler", n.startControllers},
		{"containerd", n.startContainerd},
		{"images", n.importImages},
		{"kubelet", n.startKubelet},
		{"kube-proxy", n.startKubeProxy},
		{"kube-router", n.startKubeRouter},
		{"CoreDNS", n.deployCoreDNS},
	}
	for _, s := range steps {
		start := time.Now()
		if err := s.fn(ctx); err != nil {
			return nil, fmt.Errorf("%s: %w (logs in %s)", s.what, err, cfg.State("logs"))
		}
		n.logf(">> %s up (%.1f s)", s.what, time.Since(start).Seconds())
	}
	return n, nil
}

// Down stops every process Up started, newest first, kills every Pod's
// processes and the runtime's shims, and cleans the host (Teardown). The
// state directory stays, with the logs, until the next Up.
func (n *Node) Down() error {
	var errs []error
	for i := len(n.procs) - 1; i >= 0; i-- {
		p := n.procs[i]
		if p.name == "containerd" {
			// The Pods first: containerd's shims outlive containerd.
			errs = append(errs, killCgroup(CgroupRoot)...)
			errs = append(errs, killShims()...)
		}
		if err := p.stop(15 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	n.procs = nil
	if err := Teardown(n.cfg.Layout); err != nil {
		errs = append(errs, err)
	}
	if n.lock != nil {
		_ = syscall.Flock(int(n.lock.Fd()), syscall.LOCK_UN)
		n.lock.Close()
		n.lock = nil
	}
	return errors.Join(errs...)
}

// proc is one component process.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	err  error
}

// start starts a component with its output in logs/<name>.log. It dies
// with this process (SIGKILL as its parent-death signal, internal/childproc).
func (n *Node) start(name, binary string, args ...string) (*proc, error) {
	if err := os.MkdirAll(n.cfg.State("logs"), 0o755); err != nil {
		return nil, fmt.Errorf("logs: %w", err)
	}
	log, err := os.OpenFile(n.cfg.State("logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// iptables, ipset and the CNI plugins are found on PATH.
	cmd.Env = append(os.Environ(), "PATH="+n.cfg.NodeBin("")+":"+os.Getenv("PATH")+":/usr/sbin:/sbin")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := childproc.Do(cmd.Start); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	n.procs = append(n.procs, p)
	return p, nil
}

// exited reports an error if p is no longer running.
func (p *proc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v", p.name, p.err)
	default:
		return nil
	}
}

// stop sends SIGTERM and, after within, SIGKILL.
func (p *proc) stop(within time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(within):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// waitFor polls cond every 200 ms until it holds, p exits, or timeout.
func waitFor(ctx context.Context, p *proc, timeout time.Duration, what string, cond func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if p != nil {
			if err := p.exited(); err != nil {
				return err
			}
		}
		if last = cond(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %w", what, timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func sleep100ms() { time.Sleep(100 * time.Millisecond) }

// httpOK is a readiness condition: GET url answers 200 (TLS not verified:
// loopback health endpoints with self-signed certificates).
func httpOK(url string) func(context.Context) error {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback health check
	}}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

// APIServerURL is where kube-apiserver listens: on NodeIP, which the host
// and every Pod reach.
func (n *Node) APIServerURL() string {
	return "https://" + NodeIP + ":" + strconv.Itoa(n.cfg.Ports.APIServer)
}

func (n *Node) loadAdmin() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", n.cfg.Kubeconfig())
	if err != nil {
		return fmt.Errorf("admin kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	n.Admin, n.Kube = cfg, kube
	return nil
}

// Layout is the node's layout.
func (n *Node) Layout() Layout { return n.cfg.Layout }
