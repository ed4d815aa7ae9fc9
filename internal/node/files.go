package node

import (
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/shipstream/bloodraven/internal/pki"
)

// The identities of the node's components: the client certificates the
// API server authenticates them by. The user names are those the
// bootstrap RBAC policy and the Node authorizer know.
var componentUsers = []struct {
	file   string // <file>.kubeconfig under the state directory
	user   string
	groups []string
}{
	{"admin", "bloodraven-node-admin", []string{"system:masters"}},
	{"kubelet", "system:node:" + NodeName, []string{"system:nodes"}},
	{"kube-proxy", "system:kube-proxy", nil},
	{"kube-controller-manager", "system:kube-controller-manager", nil},
	{"kube-scheduler", "system:kube-scheduler", nil},
	{"kube-router", KubeRouterUser, nil},
}

// KubeRouterUser is kube-router's user; applyRBAC binds it to what its
// NetworkPolicy controller reads.
const KubeRouterUser = "bloodraven-node:kube-router"

// clusterPKI is the node's certificate authority and what it signed.
type clusterPKI struct {
	ca *pki.CA
}

// pkiValidity is how long the node's certificates are valid: a node lives
// for a test run or a make cluster session.
const pkiValidity = 7 * 24 * time.Hour

// writeFiles writes the node's PKI, kubeconfigs and component
// configuration under the state directory.
func (n *Node) writeFiles() error {
	l := n.cfg.Layout
	for _, d := range []string{l.State("pki"), l.State("cni", "net.d"), l.State("pod-logs"), l.State("kubelet-plugins"), l.State("logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
	}
	now := time.Now()
	ca, err := pki.NewCA("bloodraven-node-ca", now, pkiValidity)
	if err != nil {
		return err
	}
	n.pki = &clusterPKI{ca: ca}
	files := map[string][]byte{
		l.State("pki", "ca.crt"): ca.CertPEM,
		l.State("pki", "ca.key"): ca.KeyPEM,
	}
	serving, err := ca.Issue("kube-apiserver", []string{
		"127.0.0.1", "localhost", NodeIP, APIServiceIP,
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + ClusterDomain,
	}, now, pkiValidity)
	if err != nil {
		return err
	}
	files[l.State("pki", "apiserver.crt")] = serving.CertPEM
	files[l.State("pki", "apiserver.key")] = serving.KeyPEM
	// kube-apiserver's client certificate for the kubelet (logs, exec,
	// port-forward): system:masters passes the kubelet's webhook
	// authorization.
	kubeletClient, err := ca.IssueClient("kube-apiserver-kubelet-client", []string{"system:masters"}, now, pkiValidity)
	if err != nil {
		return err
	}
	files[l.State("pki", "apiserver-kubelet-client.crt")] = kubeletClient.CertPEM
	files[l.State("pki", "apiserver-kubelet-client.key")] = kubeletClient.KeyPEM
	saKey, err := pki.NewKey()
	if err != nil {
		return err
	}
	files[l.State("pki", "sa.key")] = saKey
	server := n.APIServerURL()
	for _, u := range componentUsers {
		pair, err := ca.IssueClient(u.user, u.groups, now, pkiValidity)
		if err != nil {
			return err
		}
		kc, err := kubeconfig(server, ca.CertPEM, pair, u.user)
		if err != nil {
			return err
		}
		files[l.State(u.file+".kubeconfig")] = kc
	}
	files[l.State("containerd.toml")] = ContainerdConfig(l)
	files[l.State("cni", "net.d", CNIConfigName)] = CNIConfig()
	files[l.State("kubelet.yaml")] = KubeletConfig(l, n.cfg.Ports)
	files[l.State("kube-proxy.yaml")] = KubeProxyConfig(l, n.cfg.Ports)
	files[l.State("resolv.conf")] = ResolvConf()
	for path, data := range files {
		mode := os.FileMode(0o644)
		if isSecret(path) {
			mode = 0o600
		}
		if err := pki.WriteFileAtomic(path, data, mode); err != nil {
			return err
		}
	}
	// The user's fixed path (DESIGN.md §8) is the admin kubeconfig.
	if err := os.Rename(l.State("admin.kubeconfig"), l.Kubeconfig()); err != nil {
		return fmt.Errorf("admin kubeconfig: %w", err)
	}
	return nil
}

func isSecret(path string) bool {
	return strings.HasSuffix(path, ".key") || strings.HasSuffix(path, "kubeconfig")
}

// kubeconfig is a kubeconfig for user with a client certificate.
func kubeconfig(server string, caPEM []byte, pair pki.Pair, user string) ([]byte, error) {
	c := clientcmdapi.NewConfig()
	c.Clusters["bloodraven-node"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	c.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: pair.CertPEM, ClientKeyData: pair.KeyPEM}
	c.Contexts["bloodraven-node"] = &clientcmdapi.Context{Cluster: "bloodraven-node", AuthInfo: user}
	c.CurrentContext = "bloodraven-node"
	b, err := clientcmd.Write(*c)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig for %s: %w", user, err)
	}
	return b, nil
}
