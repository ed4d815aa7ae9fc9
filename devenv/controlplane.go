package devenv

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/shipstream/bloodraven/internal/childproc"
	"github.com/shipstream/bloodraven/pki"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
	"github.com/shipstream/bloodraven/testenv"
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

// StopAPIServer stops kube-apiserver (SIGTERM; it finishes what is in
// flight) and leaves etcd, the sites and the operator running: an API-server
// outage.
func (p *Playground) StopAPIServer() error {
	if err := p.env.ControlPlane.APIServer.Stop(); err != nil {
		return fmt.Errorf("stop kube-apiserver: %w", err)
	}
	p.logf(">> kube-apiserver stopped")
	return nil
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the same
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
