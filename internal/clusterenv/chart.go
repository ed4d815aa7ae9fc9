package clusterenv

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/shipstream/bloodraven/internal/node"
	"github.com/shipstream/bloodraven/internal/pki"
)

// The release as DESIGN.md §8 and the README name it.
const (
	Release   = "bloodraven"
	Namespace = "bloodraven"
	// TLSSecret is the chart's auxiliary.escrowTLS.existingSecret default.
	TLSSecret = "bloodraven-auxiliary-tls"
)

// Tools runs bin/helm and bin/kubectl against a node.
type Tools struct {
	// Root is the checkout (bin/helm, bin/kubectl, charts/bloodraven).
	Root string
	// Kubeconfig is the node's cluster-admin kubeconfig.
	Kubeconfig string
	// HelmHome holds helm's cache, config and data directories.
	HelmHome string
}

// Run runs a command line (bash) in Root with the node's kubeconfig and
// bin/ first on PATH and returns its combined output.
func (t Tools) Run(ctx context.Context, timeout time.Duration, line string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", line)
	cmd.Dir = t.Root
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(t.Root, "bin")+":"+os.Getenv("PATH"),
		"KUBECONFIG="+t.Kubeconfig,
		"HELM_CACHE_HOME="+filepath.Join(t.HelmHome, "cache"), "HELM_CONFIG_HOME="+filepath.Join(t.HelmHome, "config"),
		"HELM_DATA_HOME="+filepath.Join(t.HelmHome, "data"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("$ %s: %w\n%s", line, err, out.String())
	}
	return out.String(), nil
}

// ListenerCA signs the operator's TLS listener.
type ListenerCA struct {
	CA   *pki.CA
	Pair pki.Pair
}

// NewListenerCA issues the listener's certificate for both Services of the
// release (the leader-only one the deployment API's callers use and the
// webhooks'), each .svc and .svc.cluster.local.
func NewListenerCA(now time.Time) (ListenerCA, error) {
	ca, err := pki.NewCA("bloodraven-cluster-listener-ca", now, 30*24*time.Hour)
	if err != nil {
		return ListenerCA{}, err
	}
	var hosts []string
	for _, svc := range []string{Release, Release + "-webhooks"} {
		hosts = append(hosts, svc+"."+Namespace+".svc", svc+"."+Namespace+".svc."+node.ClusterDomain)
	}
	pair, err := ca.Issue(Release, hosts, now, 30*24*time.Hour)
	if err != nil {
		return ListenerCA{}, err
	}
	return ListenerCA{CA: ca, Pair: pair}, nil
}

// InstallChart installs charts/bloodraven as a platform team with a TLS
// Secret of its own would: the Secret first (namespace created if
// missing), then helm install with two replicas, the deployment API and
// its NetworkPolicy (the API server's webhook calls come from the node's
// address), the webhooks' caBundle, and extra --set flags; then it waits
// for the rollout.
func InstallChart(ctx context.Context, kube kubernetes.Interface, tools Tools, tls ListenerCA, extra ...string) error {
	return InstallChartFrom(ctx, kube, tools, tls, "charts/bloodraven", extra...)
}

// InstallChartFrom is InstallChart of the chart at path (relative to the
// checkout, or absolute): an earlier release's, for an upgrade.
func InstallChartFrom(ctx context.Context, kube kubernetes.Interface, tools Tools, tls ListenerCA, path string, extra ...string) error {
	if err := CreateTLSSecret(ctx, kube, tls); err != nil {
		return err
	}
	args := append([]string{
		"helm install " + Release + " " + path + " --namespace " + Namespace,
		"--set replicas=2",
		"--set auxiliary.deployAPI.enabled=true",
		"--set auxiliary.deployAPI.networkPolicy.enabled=true",
		"--set 'auxiliary.deployAPI.networkPolicy.apiServerSources[0].ipBlock.cidr=" + node.NodeIP + "/32'",
		"--set webhooks.caBundle=" + base64.StdEncoding.EncodeToString(tls.CA.CertPEM),
	}, extra...)
	if _, err := tools.Run(ctx, 3*time.Minute, strings.Join(args, " ")); err != nil {
		return err
	}
	if _, err := tools.Run(ctx, 4*time.Minute, fmt.Sprintf("kubectl --namespace %s rollout status deployment/%s --timeout=4m", Namespace, Release)); err != nil {
		return err
	}
	return waitWebhooks(ctx, tools)
}

// webhookProbe is a group whose dry-run create the API server sends to the
// release's validating webhook.
const webhookProbe = `apiVersion: bloodraven.shipstream.io/v1alpha1
kind: MysqlFailoverGroup
metadata: {name: webhook-probe, namespace: ` + Namespace + `}
spec:
  sites: [{name: iad}, {name: pdx}]
`

// waitWebhooks waits until the API server reaches the release's webhooks
// through their Service: a rolled-out Deployment is not yet routed to
// (kube-proxy and the NetworkPolicy engine program its Pods a moment
// later), and a create in that moment fails with "failed calling webhook".
func waitWebhooks(ctx context.Context, tools Tools) error {
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := tools.Run(ctx, 30*time.Second, "kubectl create --dry-run=server -o name -f - <<'EOF'\n"+webhookProbe+"EOF")
		if err == nil || strings.Contains(out, "denied the request") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the API server does not reach the webhooks a minute after the rollout: %w", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// CreateTLSSecret makes the listener's Secret (tls.crt, tls.key and the
// CA's ca.crt) in the release's namespace, creating the namespace if it is
// missing: what the chart's auxiliary.escrowTLS.existingSecret expects
// before helm install.
func CreateTLSSecret(ctx context.Context, kube kubernetes.Interface, tls ListenerCA) error {
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", Namespace, err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: TLSSecret, Namespace: Namespace},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": tls.Pair.CertPEM, "tls.key": tls.Pair.KeyPEM, "ca.crt": tls.CA.CertPEM},
	}
	if _, err := kube.CoreV1().Secrets(Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("secret %s: %w", TLSSecret, err)
	}
	return nil
}
