package node

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func (n *Node) startEtcd(ctx context.Context) error {
	p := n.cfg.Ports
	client := "http://127.0.0.1:" + strconv.Itoa(p.Etcd)
	peer := "http://127.0.0.1:" + strconv.Itoa(p.EtcdPeer)
	proc, err := n.start("etcd", n.cfg.Bin("etcd"),
		"--name=node", "--data-dir="+n.cfg.State("etcd"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=node="+peer, "--unsafe-no-fsync")
	if err != nil {
		return err
	}
	return waitFor(ctx, proc, time.Minute, "etcd", httpOK(client+"/health"))
}

func (n *Node) startAPIServer(ctx context.Context) error {
	l, p := n.cfg.Layout, n.cfg.Ports
	proc, err := n.start("kube-apiserver", l.Bin("kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:"+strconv.Itoa(p.Etcd),
		"--bind-address="+NodeIP, "--advertise-address="+NodeIP, "--secure-port="+strconv.Itoa(p.APIServer),
		"--tls-cert-file="+l.State("pki", "apiserver.crt"), "--tls-private-key-file="+l.State("pki", "apiserver.key"),
		"--client-ca-file="+l.State("pki", "ca.crt"),
		"--service-cluster-ip-range="+ServiceCIDR,
		"--service-account-issuer=https://kubernetes.default.svc."+ClusterDomain,
		"--service-account-key-file="+l.State("pki", "sa.key"),
		"--service-account-signing-key-file="+l.State("pki", "sa.key"),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--kubelet-client-certificate="+l.State("pki", "apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+l.State("pki", "apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP",
		"--profiling=false")
	if err != nil {
		return err
	}
	if err := waitFor(ctx, proc, 2*time.Minute, "kube-apiserver", httpOK(n.APIServerURL()+"/readyz")); err != nil {
		return err
	}
	return n.loadAdmin()
}

// applyRBAC grants kube-router what its NetworkPolicy controller reads
// (the other components' users are in the bootstrap policy).
func (n *Node) applyRBAC(ctx context.Context) error {
	read := []string{"get", "list", "watch"}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "bloodraven-node:kube-router"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"namespaces", "pods", "services", "nodes", "endpoints"}, Verbs: read},
			{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: read},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: read},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bloodraven-node:kube-router"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: KubeRouterUser}},
	}
	if _, err := n.Kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kube-router role: %w", err)
	}
	if _, err := n.Kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kube-router binding: %w", err)
	}
	return nil
}

func (n *Node) startControllers(ctx context.Context) error {
	l, p := n.cfg.Layout, n.cfg.Ports
	kcmConfig := l.State("kube-controller-manager.kubeconfig")
	kcm, err := n.start("kube-controller-manager", l.NodeBin("kube-controller-manager"),
		"--kubeconfig="+kcmConfig, "--authentication-kubeconfig="+kcmConfig, "--authorization-kubeconfig="+kcmConfig,
		"--root-ca-file="+l.State("pki", "ca.crt"),
		"--service-account-private-key-file="+l.State("pki", "sa.key"),
		"--use-service-account-credentials=true",
		"--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(p.ControllerMgr))
	if err != nil {
		return err
	}
	schedConfig := l.State("kube-scheduler.kubeconfig")
	sched, err := n.start("kube-scheduler", l.NodeBin("kube-scheduler"),
		"--kubeconfig="+schedConfig, "--authentication-kubeconfig="+schedConfig, "--authorization-kubeconfig="+schedConfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(p.Scheduler))
	if err != nil {
		return err
	}
	if err := waitFor(ctx, kcm, time.Minute, "kube-controller-manager",
		httpOK("https://127.0.0.1:"+strconv.Itoa(p.ControllerMgr)+"/healthz")); err != nil {
		return err
	}
	if err := waitFor(ctx, sched, time.Minute, "kube-scheduler",
		httpOK("https://127.0.0.1:"+strconv.Itoa(p.Scheduler)+"/healthz")); err != nil {
		return err
	}
	// Pods need their namespace's ServiceAccount and the root CA
	// ConfigMap (every kube-api-access volume projects it).
	return waitFor(ctx, kcm, time.Minute, "the default ServiceAccount and kube-root-ca.crt", func(ctx context.Context) error {
		if _, err := n.Kube.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return err
		}
		cm, err := n.Kube.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !strings.Contains(cm.Data["ca.crt"], "BEGIN CERTIFICATE") {
			return fmt.Errorf("kube-root-ca.crt has no certificate")
		}
		return nil
	})
}

func (n *Node) startContainerd(ctx context.Context) error {
	proc, err := n.start("containerd", n.cfg.NodeBin("containerd"), "--config="+n.cfg.State("containerd.toml"))
	if err != nil {
		return err
	}
	return waitFor(ctx, proc, time.Minute, "containerd", func(ctx context.Context) error {
		_, err := n.ctr(ctx, "version")
		return err
	})
}

// ctr runs containerd's client against the node's containerd, in the
// namespace the CRI uses.
func (n *Node) ctr(ctx context.Context, args ...string) ([]byte, error) {
	full := append([]string{"--address=" + ContainerdSocket(), "--namespace=k8s.io"}, args...)
	out, err := exec.CommandContext(ctx, n.cfg.NodeBin("ctr"), full...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

func (n *Node) startKubelet(ctx context.Context) error {
	l := n.cfg.Layout
	proc, err := n.start("kubelet", l.NodeBin("kubelet"),
		"--config="+l.State("kubelet.yaml"), "--kubeconfig="+l.State("kubelet.kubeconfig"),
		"--root-dir="+KubeletRootDir(), "--hostname-override="+NodeName, "--node-ip="+NodeIP, "--v=1")
	if err != nil {
		return err
	}
	return waitFor(ctx, proc, 2*time.Minute, "Node "+NodeName, func(ctx context.Context) error {
		node, err := n.Kube.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("not ready: %s: %s", c.Reason, c.Message)
			}
		}
		return fmt.Errorf("no Ready condition yet")
	})
}

func (n *Node) startKubeProxy(ctx context.Context) error {
	proc, err := n.start("kube-proxy", n.cfg.NodeBin("kube-proxy"), "--config="+n.cfg.State("kube-proxy.yaml"), "--v=1")
	if err != nil {
		return err
	}
	return waitFor(ctx, proc, time.Minute, "kube-proxy",
		httpOK("http://127.0.0.1:"+strconv.Itoa(n.cfg.Ports.ProxyHealthz)+"/healthz"))
}

// startKubeRouter starts kube-router as a NetworkPolicy engine only: no
// routing (one node), no service proxy (kube-proxy's). It is a test
// harness: see docs/node.md for why this engine and what it does not do.
func (n *Node) startKubeRouter(ctx context.Context) error {
	p := n.cfg.Ports
	proc, err := n.start("kube-router", n.cfg.NodeBin("kube-router"),
		"--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
		"--kubeconfig="+n.cfg.State("kube-router.kubeconfig"),
		"--hostname-override="+NodeName,
		"--service-cluster-ip-range="+ServiceCIDR,
		"--health-port="+strconv.Itoa(p.RouterHealth), "--metrics-port=0", "--v=1")
	if err != nil {
		return err
	}
	return waitFor(ctx, proc, time.Minute, "kube-router",
		httpOK("http://127.0.0.1:"+strconv.Itoa(p.RouterHealth)+"/healthz"))
}

// ResolveInCluster asks the cluster DNS Service for host's A records, from
// this machine (kube-proxy routes the Service address for local traffic
// too).
func ResolveInCluster(ctx context.Context, host string) ([]string, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort(DNSServiceIP, "53"))
	}}
	return r.LookupHost(ctx, host)
}
