package devenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/shipstream/bloodraven/internal/childproc"
	"github.com/shipstream/bloodraven/internal/pki"
	"github.com/shipstream/bloodraven/internal/testenv"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
)

func (p *Playground) startControlPlane() error {
	p.logf(">> starting etcd and kube-apiserver (state in %s)", p.cfg.StateDir)
	apiDir := filepath.Join(p.cfg.StateDir, "apiserver")
	etcdDir := filepath.Join(p.cfg.StateDir, "etcd")
	launchers := filepath.Join(p.cfg.StateDir, "launchers")
	for _, d := range []string{apiDir, etcdDir, launchers} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
	}
	cp, err := testenv.ControlPlane(filepath.Join(p.cfg.Root, "bin"), launchers)
	if err != nil {
		return err
	}
	cp.APIServer.CertDir, cp.Etcd.DataDir = apiDir, etcdDir
	p.env = &envtest.Environment{
		Scheme:                   bloodravenscheme.New(),
		CRDDirectoryPaths:        []string{filepath.Join(p.cfg.Root, "config", "crd")},
		ErrorIfCRDPathMissing:    true,
		BinaryAssetsDirectory:    filepath.Join(p.cfg.Root, "bin"),
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
		ControlPlane:             cp,
	}
	if err := childproc.Do(func() error { _, err := p.env.Start(); return err }); err != nil {
		return fmt.Errorf("control plane: %w", err)
	}
	admin, err := p.env.AddUser(envtest.User{Name: "playground-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("admin user: %w", err)
	}
	p.AdminConfig = rest.CopyConfig(admin.Config())
	kc, err := admin.KubeConfig()
	if err != nil {
		return fmt.Errorf("admin kubeconfig: %w", err)
	}
	if err := pki.WriteFileAtomic(p.Paths.Kubeconfig, kc, 0o600); err != nil {
		return err
	}
	p.logf(">> control plane up at %s; CRDs installed", p.AdminConfig.Host)
	return nil
}

// KillAPIServer kills kube-apiserver with SIGKILL, as a crash or the loss
// of its node would: requests in flight get no answer and nothing is
// drained. etcd, the sites and the operator keep running. (A SIGTERM drains
// for about ten seconds first, answering 503, which blurs when the outage
// began.)
func (p *Playground) KillAPIServer() error {
	pid, err := childProcess("kube-apiserver", "--cert-dir="+p.env.ControlPlane.APIServer.CertDir)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill kube-apiserver: %w", err)
	}
	// Let envtest reap it, then let it forget it. Its Stop signals the
	// process group unless it saw the exit; the group may be gone by then.
	_ = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
		return os.IsNotExist(err), nil
	})
	if err := p.env.ControlPlane.APIServer.Stop(); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop kube-apiserver: %w", err)
	}
	p.logf(">> kube-apiserver killed")
	return nil
}

// childProcess finds this process's child running binary with arg among its
// arguments.
func childProcess(binary, arg string) (int, error) {
	children, err := childproc.Children(os.Getpid())
	if err != nil {
		return 0, err
	}
	for pid, args := range children {
		if filepath.Base(args[0]) == binary && slices.Contains(args, arg) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no %s with %s among this process's children", binary, arg)
}

// StartAPIServer starts kube-apiserver again after KillAPIServer, on the same
// address with the same certificates and service-account keys, so every
// kubeconfig and token still works; it returns once the API server is
// healthy.
func (p *Playground) StartAPIServer() error {
	if err := childproc.Do(p.env.ControlPlane.APIServer.Start); err != nil {
		return fmt.Errorf("start kube-apiserver: %w", err)
	}
	p.logf(">> kube-apiserver started again")
	return nil
}

// RestartEtcd stops etcd (SIGTERM) and starts it again on the same client
// address and data directory, with kube-apiserver left running: the API
// server loses its storage for the duration and reconnects by itself.
func (p *Playground) RestartEtcd() error {
	etcd := p.env.ControlPlane.Etcd
	if err := etcd.Stop(); err != nil {
		return fmt.Errorf("stop etcd: %w", err)
	}
	if err := childproc.Do(etcd.Start); err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	p.logf(">> etcd restarted")
	return nil
}
