package clusterenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/internal/mariadblocal"
	"github.com/shipstream/bloodraven/internal/node"
	"github.com/shipstream/bloodraven/internal/pki"
	"github.com/shipstream/bloodraven/internal/scene"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
)

// DeployImage is the name under which bloodraven-deploy's image is
// available to Pods (DESIGN.md §8: `bloodraven-deploy:dev`, which the
// runtime reads as docker.io/library/bloodraven-deploy:dev).
const DeployImage = "docker.io/library/bloodraven-deploy:dev"

// Config is where the cluster keeps its files.
type Config struct {
	// Root is the checkout: bin/, bin/node/, bin/image/ (make image),
	// charts/bloodraven and VERSION.
	Root string
	// Registry is the registry part of make image's names; default
	// ghcr.io/shipstream (the Makefile's IMAGE_REGISTRY).
	Registry string
	// MySQLPorts are the iad and pdx sites' ports; default make dev's.
	MySQLPorts [2]int
	// Log receives progress lines; default io.Discard.
	Log io.Writer
}

// Cluster is a running make cluster.
type Cluster struct {
	Node  *node.Node
	Sites []*mariadblocal.Server
	Tools Tools
	// CACert is the TLS listener's CA (DESIGN.md §8: .dev/cluster/ca.crt).
	CACert string
	log    io.Writer
}

func (c *Cluster) logf(format string, args ...any) { fmt.Fprintf(c.log, format+"\n", args...) }

// StateDir is make cluster's state directory under root.
func StateDir(root string) string { return filepath.Join(root, ".dev", "cluster") }

// Start brings the node up, the sites, the release and the playground's
// group and database, and returns once the group is bootstrapped. On error
// everything it started is stopped.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.Registry == "" {
		cfg.Registry = "ghcr.io/shipstream"
	}
	if cfg.MySQLPorts == [2]int{} {
		cfg.MySQLPorts = [2]int{13306, 13307}
	}
	version, err := os.ReadFile(filepath.Join(cfg.Root, "VERSION"))
	if err != nil {
		return nil, fmt.Errorf("VERSION: %w", err)
	}
	images := []node.Image{
		{Tarball: filepath.Join(cfg.Root, "bin", "image", "bloodraven.tar")},
		{Tarball: filepath.Join(cfg.Root, "bin", "image", "bloodraven-deploy.tar"),
			Tags: map[string]string{cfg.Registry + "/bloodraven-deploy:" + strings.TrimSpace(string(version)): DeployImage}},
	}
	for _, im := range images {
		if _, err := os.Stat(im.Tarball); err != nil {
			return nil, fmt.Errorf("%w (make image builds it)", err)
		}
	}
	layout := node.Layout{Root: cfg.Root, StateDir: StateDir(cfg.Root)}
	c := &Cluster{log: cfg.Log, CACert: layout.OperatorCA(),
		Tools: Tools{Root: cfg.Root, Kubeconfig: layout.Kubeconfig(), HelmHome: filepath.Join(layout.StateDir, "helm")}}
	c.Node, err = node.Up(ctx, node.Config{Layout: layout, Images: images, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()
	if err := c.startSites(ctx, layout, cfg.MySQLPorts); err != nil {
		return nil, err
	}
	tls, err := NewListenerCA(time.Now())
	if err != nil {
		return nil, err
	}
	if err := pki.WriteFileAtomic(c.CACert, tls.CA.CertPEM, 0o644); err != nil {
		return nil, err
	}
	c.logf(">> helm install %s charts/bloodraven --namespace %s (two replicas, the deployment API and its NetworkPolicy)", Release, Namespace)
	start := time.Now()
	if err := InstallChart(ctx, c.Node.Kube, c.Tools, tls); err != nil {
		return nil, err
	}
	c.logf(">> release %s rolled out (%.1f s)", Release, time.Since(start).Seconds())
	if err := c.createScene(ctx, cfg.MySQLPorts); err != nil {
		return nil, err
	}
	return c, nil
}

// startSites starts the playground's sites (StartSites) under the state
// directory.
func (c *Cluster) startSites(ctx context.Context, layout node.Layout, ports [2]int) error {
	c.logf(">> starting MariaDB sites iad (%s:%d) and pdx (%s:%d)", node.NodeIP, ports[0], node.NodeIP, ports[1])
	sites, err := StartSites(ctx, layout.State("mysql"), ports, devenv.MySQLUser, devenv.MySQLPassword)
	c.Sites = sites
	return err
}

// StartSites starts a group's two sites, iad and pdx, in dir/iad and
// dir/pdx, on loopback and on the node's address (which the Pods reach),
// with the administrative account user/password; pdx replicates from iad.
// On error the servers started so far are returned for the caller to stop.
func StartSites(ctx context.Context, dir string, ports [2]int, user, password string) ([]*mariadblocal.Server, error) {
	return StartSitesWithTLS(ctx, dir, ports, user, password, nil)
}

// StartSitesWithTLS is StartSites with each site offering TLS with a
// certificate from ca for the node's address (what a group's spec.tls
// verifies: the site's host), when ca is not nil.
func StartSitesWithTLS(ctx context.Context, dir string, ports [2]int, user, password string, ca *pki.CA) ([]*mariadblocal.Server, error) {
	var sites []*mariadblocal.Server
	for i, name := range []string{"iad", "pdx"} {
		o := mariadblocal.Options{Bind: []string{node.NodeIP}}
		if ca != nil {
			pair, err := ca.Issue(name, []string{node.NodeIP, "127.0.0.1"}, time.Now(), 30*24*time.Hour)
			if err != nil {
				return sites, err
			}
			o.TLS = &mariadblocal.ServerTLS{CA: ca.CertPEM, Cert: pair.CertPEM, Key: pair.KeyPEM}
		}
		s, err := mariadblocal.StartWith(ctx, filepath.Join(dir, name), name, ports[i], i+1, user, password, o)
		if err != nil {
			return sites, err
		}
		sites = append(sites, s)
	}
	return sites, sites[1].ReplicateFrom(ctx, sites[0])
}

// WaitBootstrapped waits until the group has a topology generation and no
// transition, and returns it.
func WaitBootstrapped(ctx context.Context, c client.Client, key client.ObjectKey, timeout time.Duration) (*bloodravenv1alpha1.MysqlFailoverGroup, error) {
	g := &bloodravenv1alpha1.MysqlFailoverGroup{}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, key, g)
		return err == nil && g.Status.TopologyGeneration >= 1 && g.Status.Transition == nil, nil
	})
	if err != nil {
		return g, fmt.Errorf("group %s not bootstrapped after %s: %w (status %+v)", key, timeout, err, g.Status)
	}
	return g, nil
}

// createScene creates the playground's group and database (DESIGN.md §8),
// the sites at the node's address, and waits until the group is
// bootstrapped by the release's leader.
func (c *Cluster) createScene(ctx context.Context, ports [2]int) error {
	cl, err := client.New(c.Node.Admin, client.Options{Scheme: bloodravenscheme.New()})
	if err != nil {
		return err
	}
	ns := devenv.PlaygroundNamespace
	g := scene.Group(ns, devenv.GroupName,
		bloodravenv1alpha1.Site{Name: "iad", Host: node.NodeIP, Port: int32(ports[0])},
		bloodravenv1alpha1.Site{Name: "pdx", Host: node.NodeIP, Port: int32(ports[1])})
	g.Spec.CredentialsSecretRef = &bloodravenv1alpha1.SecretReference{Name: devenv.MySQLSecret}
	objs := []client.Object{
		// The label admits the namespace's deploy clients to the API
		// (the chart's NetworkPolicy).
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"shipstream.io/mysql-client": "true"}}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: devenv.DeployServiceAccount, Namespace: ns}},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: devenv.MySQLSecret, Namespace: ns},
			StringData: map[string]string{"username": devenv.MySQLUser, "password": devenv.MySQLPassword},
		},
		g,
		scene.Database(ns, devenv.DatabaseName, devenv.GroupName,
			bloodravenv1alpha1.DeploymentClient{Namespace: ns, ServiceAccount: devenv.DeployServiceAccount}),
	}
	for _, o := range objs {
		if err := cl.Create(ctx, o); err != nil {
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
	}
	got, err := WaitBootstrapped(ctx, cl, client.ObjectKeyFromObject(g), 2*time.Minute)
	if err != nil {
		return fmt.Errorf("%w (kubectl -n %s logs deploy/%s)", err, Namespace, Release)
	}
	c.logf(">> group %s/%s bootstrapped: active site %s, topologyGeneration %d", ns, g.Name, got.Status.ActiveSite, got.Status.TopologyGeneration)
	return nil
}

// Stop stops the sites and the node and cleans the host.
func (c *Cluster) Stop() error {
	for _, s := range c.Sites {
		s.Stop()
	}
	c.Sites = nil
	var errs []error
	if c.Node != nil {
		errs = append(errs, c.Node.Down())
	}
	return errors.Join(errs...)
}
