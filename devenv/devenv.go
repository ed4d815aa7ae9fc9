package devenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/mariadblocal"
	"github.com/shipstream/bloodraven/pki"
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
	DeployAudience         = "bloodraven-deploy"
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
	// MySQLPorts are the loopback ports of the iad and pdx MariaDB sites.
	// Default 13306 and 13307.
	MySQLPorts [2]int
	// Log receives progress lines; default io.Discard.
	Log io.Writer
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

func (p *Playground) startControlPlane() error {
	p.logf(">> starting etcd and kube-apiserver (state in %s)", p.cfg.StateDir)
	apiDir := filepath.Join(p.cfg.StateDir, "apiserver")
	etcdDir := filepath.Join(p.cfg.StateDir, "etcd")
	for _, d := range []string{apiDir, etcdDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
	}
	p.env = &envtest.Environment{
		Scheme:                   bloodravenscheme.New(),
		CRDDirectoryPaths:        []string{filepath.Join(p.cfg.Root, "config", "crd")},
		ErrorIfCRDPathMissing:    true,
		BinaryAssetsDirectory:    filepath.Join(p.cfg.Root, "bin"),
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
		ControlPlane: envtest.ControlPlane{
			APIServer: &envtest.APIServer{CertDir: apiDir},
			Etcd:      &envtest.Etcd{DataDir: etcdDir},
		},
	}
	if _, err := p.env.Start(); err != nil {
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

// installOperatorIdentity creates the operator's namespace, ServiceAccount
// and RBAC (config/rbac/role.yaml, generated) and writes a kubeconfig that
// authenticates as that ServiceAccount.
func (p *Playground) installOperatorIdentity(ctx context.Context, c client.Client, kube kubernetes.Interface) error {
	data, err := os.ReadFile(filepath.Join(p.cfg.Root, "config", "rbac", "role.yaml"))
	if err != nil {
		return fmt.Errorf("operator RBAC: %w", err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		return fmt.Errorf("operator RBAC %s: %w", "config/rbac/role.yaml", err)
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OperatorNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: OperatorServiceAccount, Namespace: OperatorNamespace}},
		role,
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: OperatorServiceAccount, Namespace: OperatorNamespace}},
		},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
	}
	token, err := requestToken(ctx, kube, OperatorNamespace, OperatorServiceAccount, nil, 7*24*time.Hour)
	if err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["playground"] = &clientcmdapi.Cluster{Server: p.AdminConfig.Host, CertificateAuthorityData: p.AdminConfig.CAData}
	kc.AuthInfos["bloodraven"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["bloodraven"] = &clientcmdapi.Context{Cluster: "playground", AuthInfo: "bloodraven", Namespace: OperatorNamespace}
	kc.CurrentContext = "bloodraven"
	out, err := clientcmd.Write(*kc)
	if err != nil {
		return fmt.Errorf("operator kubeconfig: %w", err)
	}
	return pki.WriteFileAtomic(p.Paths.OperatorKubeconfig, out, 0o600)
}

func requestToken(ctx context.Context, kube kubernetes.Interface, ns, name string, audiences []string, ttl time.Duration) (string, error) {
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To(int64(ttl.Seconds()))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("TokenRequest for %s/%s: %w", ns, name, err)
	}
	return tr.Status.Token, nil
}

func (p *Playground) writeServingCertificate() error {
	now := time.Now()
	ca, err := pki.NewCA("bloodraven playground CA", now, 30*24*time.Hour)
	if err != nil {
		return err
	}
	pair, err := ca.Issue("bloodraven", []string{"localhost", "127.0.0.1", "::1",
		"bloodraven." + OperatorNamespace + ".svc", "bloodraven." + OperatorNamespace + ".svc.cluster.local"}, now, 30*24*time.Hour)
	if err != nil {
		return err
	}
	if err := pki.WriteFileAtomic(p.Paths.CACert, ca.CertPEM, 0o644); err != nil {
		return err
	}
	return pair.WriteTLSDir(p.Paths.TLSDir)
}

// Credentials of the playground's MariaDB administrative account, kept in
// the Secret playground/playground-mysql.
const (
	MySQLUser     = "bloodraven"
	MySQLPassword = "playground-only"
	MySQLSecret   = "playground-mysql"
)

// startSites starts the iad and pdx MariaDB servers, pdx replicating from
// iad with GTIDs.
func (p *Playground) startSites(ctx context.Context) error {
	p.logf(">> starting MariaDB sites iad (127.0.0.1:%d) and pdx (127.0.0.1:%d)", p.cfg.MySQLPorts[0], p.cfg.MySQLPorts[1])
	for i, name := range []string{"iad", "pdx"} {
		s, err := mariadblocal.Start(ctx, filepath.Join(p.cfg.StateDir, "mysql", name), name, p.cfg.MySQLPorts[i], i+1, MySQLUser, MySQLPassword)
		if err != nil {
			return err
		}
		p.Sites = append(p.Sites, s)
	}
	return p.Sites[1].ReplicateFrom(ctx, p.Sites[0])
}

// installWebhooks registers the generated webhook configuration
// (config/webhook) with the API server, pointed at the operator's TLS
// listener on loopback and trusting the playground CA.
func (p *Playground) installWebhooks(ctx context.Context, c client.Client) error {
	data, err := os.ReadFile(filepath.Join(p.cfg.Root, "config", "webhook", "manifests.yaml"))
	if err != nil {
		return fmt.Errorf("webhook configuration: %w", err)
	}
	caPEM, err := os.ReadFile(p.Paths.CACert)
	if err != nil {
		return err
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := yaml.UnmarshalStrict(data, cfg); err != nil {
		return fmt.Errorf("webhook configuration: %w", err)
	}
	cfg.Name = "bloodraven"
	_, port, err := net.SplitHostPort(p.cfg.TLSAddr)
	if err != nil {
		return fmt.Errorf("TLS address %q: %w", p.cfg.TLSAddr, err)
	}
	for i := range cfg.Webhooks {
		w := &cfg.Webhooks[i]
		url := "https://127.0.0.1:" + port + *w.ClientConfig.Service.Path
		w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM}
	}
	if err := c.Create(ctx, cfg); err != nil {
		return fmt.Errorf("create webhook configuration: %w", err)
	}
	p.logf(">> validating webhooks registered (%d)", len(cfg.Webhooks))
	return nil
}

// OperatorIdentity is the user name the operator authenticates as.
func OperatorIdentity() string {
	return "system:serviceaccount:" + OperatorNamespace + ":" + OperatorServiceAccount
}

// Listeners are an operator process's addresses.
type Listeners struct {
	TLS, Aux, Metrics, Probe string
}

// Operator is one running operator process.
type Operator struct {
	Listeners Listeners
	Log       string
	cmd       *exec.Cmd
	exited    chan error
	stopped   atomic.Bool // Stop was called: the supervisor does not restart it
}

// Exited delivers the process's exit error once, then is closed.
func (o *Operator) Exited() <-chan error { return o.exited }

// Stop sends SIGTERM (graceful shutdown, leadership released) and waits,
// killing the process after 20 s.
func (o *Operator) Stop() {
	if o == nil || o.cmd.Process == nil {
		return
	}
	o.stopped.Store(true)
	_ = o.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-o.exited:
	case <-time.After(20 * time.Second):
		_ = o.cmd.Process.Kill()
		<-o.exited
	}
}

func (p *Playground) startOperator(ctx context.Context) error {
	op, err := p.StartOperator(ctx, Listeners{TLS: p.cfg.TLSAddr, Aux: p.cfg.AuxAddr, Metrics: p.cfg.MetricsAddr, Probe: p.cfg.ProbeAddr},
		p.Paths.OperatorLog, true)
	if err != nil {
		return err
	}
	p.operator = op
	return nil
}

// StartOperator starts an operator process as the operator's ServiceAccount,
// logging to logPath, and waits until it is ready and, with wantLeader, the
// elected leader. Extra processes (a second replica, a restart) are stopped
// by their caller.
func (p *Playground) StartOperator(ctx context.Context, l Listeners, logPath string, wantLeader bool) (*Operator, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("operator log: %w", err)
	}
	cmd := exec.Command(p.cfg.OperatorBinary,
		"--deploy-api",
		"--leader-election-namespace="+OperatorNamespace,
		"--tls-cert-dir="+p.Paths.TLSDir,
		"--auxiliary-bind-address="+l.Aux,
		"--metrics-bind-address="+l.Metrics,
		"--health-probe-bind-address="+l.Probe,
		"--operator-identity="+OperatorIdentity(),
		// Real MariaDB sites: failovers move the writable primary.
		"--topology-driver=mysql",
		"--probe-interval=2s",
	)
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+p.Paths.OperatorKubeconfig,
		"BLOODRAVEN_ESCROW_TLS_ADDR="+l.TLS,
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// If this process dies without Down, the kernel stops the operator too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	p.logf(">> starting the operator as %s (log: %s)", OperatorIdentity(), logPath)
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start operator %s: %w (run `make build`)", p.cfg.OperatorBinary, err)
	}
	op := &Operator{Listeners: l, Log: logPath, cmd: cmd, exited: make(chan error, 1)}
	go func() {
		err := cmd.Wait()
		logFile.Close()
		op.exited <- err
		close(op.exited)
	}()
	if err := p.waitOperatorReady(ctx, op, wantLeader); err != nil {
		op.Stop()
		return nil, err
	}
	return op, nil
}

// waitOperatorReady waits until the operator's readiness probe passes and,
// with wantLeader, it reports itself leader on the auxiliary status page.
func (p *Playground) waitOperatorReady(ctx context.Context, op *Operator, wantLeader bool) error {
	probe := "http://" + loopback(op.Listeners.Probe) + "/readyz"
	status := "http://" + loopback(op.Listeners.Aux) + "/status"
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case err := <-op.exited:
			return fmt.Errorf("operator exited during start-up (%v); last lines of %s:\n%s", err, op.Log, tail(op.Log, 15))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if ok(hc, probe) && (!wantLeader || bodyContains(hc, status, `"leader":true`)) {
			p.logf(">> operator ready (leader wanted: %v)", wantLeader)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("operator not ready after 90s; last lines of %s:\n%s", op.Log, tail(op.Log, 15))
		}
	}
}

// WaitLeader waits until op reports itself the elected leader.
func (p *Playground) WaitLeader(ctx context.Context, op *Operator, timeout time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for !bodyContains(hc, "http://"+loopback(op.Listeners.Aux)+"/status", `"leader":true`) {
		if time.Now().After(deadline) {
			return fmt.Errorf("operator on %s not leader after %v", op.Listeners.Aux, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

func (p *Playground) createScene(ctx context.Context, c client.Client, kube kubernetes.Interface) error {
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: PlaygroundNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: DeployServiceAccount, Namespace: PlaygroundNamespace}},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: MySQLSecret, Namespace: PlaygroundNamespace},
			StringData: map[string]string{"username": MySQLUser, "password": MySQLPassword},
		},
		&v1.MysqlFailoverGroup{
			ObjectMeta: metav1.ObjectMeta{Name: GroupName, Namespace: PlaygroundNamespace},
			Spec: v1.MysqlFailoverGroupSpec{
				Sites: []v1.Site{
					{Name: "iad", Host: "127.0.0.1", Port: int32(p.cfg.MySQLPorts[0])},
					{Name: "pdx", Host: "127.0.0.1", Port: int32(p.cfg.MySQLPorts[1])},
				},
				CredentialsSecretRef: &v1.SecretReference{Name: MySQLSecret},
			},
		},
		&v1.MysqlDatabase{
			ObjectMeta: metav1.ObjectMeta{Name: DatabaseName, Namespace: PlaygroundNamespace},
			Spec: v1.MysqlDatabaseSpec{
				GroupRef:          v1.GroupReference{Name: GroupName},
				DatabaseName:      "counter",
				DeploymentClients: []v1.DeploymentClient{{Namespace: PlaygroundNamespace, ServiceAccount: DeployServiceAccount}},
			},
		},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
	}
	token, err := requestToken(ctx, kube, PlaygroundNamespace, DeployServiceAccount, []string{DeployAudience}, 24*time.Hour)
	if err != nil {
		return err
	}
	if err := pki.WriteFileAtomic(p.Paths.DeployToken, []byte(token), 0o600); err != nil {
		return err
	}
	p.logf(">> playground scene created: group %s/%s, database %s, deploy token for %s/%s", PlaygroundNamespace, GroupName, DatabaseName, PlaygroundNamespace, DeployServiceAccount)
	// Hand over a bootstrapped group: until then grants would meet the
	// bootstrap transition (423) and be fenced by generation 1 right after.
	g := &v1.MysqlFailoverGroup{}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := c.Get(ctx, client.ObjectKey{Namespace: PlaygroundNamespace, Name: GroupName}, g); err == nil &&
			g.Status.TopologyGeneration >= 1 && g.Status.Transition == nil {
			p.logf(">> group bootstrapped: active site %s, topologyGeneration %d", g.Status.ActiveSite, g.Status.TopologyGeneration)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("group %s/%s not bootstrapped after 60s; see %s", PlaygroundNamespace, GroupName, p.Paths.OperatorLog)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
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
