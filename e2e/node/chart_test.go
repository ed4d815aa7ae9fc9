package nodesuite

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shipstream/bloodraven/internal/node"
	"github.com/shipstream/bloodraven/internal/pki"
)

// release is the chart's release as DESIGN.md §8 and the README name it.
const (
	release   = "bloodraven"
	releaseNS = "bloodraven"
)

// listenerCA signs the operator's TLS listener: the Secret the chart's
// auxiliary.escrowTLS.existingSecret names, and the webhooks' caBundle.
type listenerCA struct {
	ca   *pki.CA
	pair pki.Pair
}

// newListenerCA issues the listener's certificate for both Services of the
// release, .svc and .svc.cluster.local.
func newListenerCA(t *testing.T) listenerCA {
	t.Helper()
	now := time.Now()
	ca, err := pki.NewCA("bloodraven-nodesuite-ca", now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, svc := range []string{release, release + "-webhooks"} {
		hosts = append(hosts, svc+"."+releaseNS+".svc", svc+"."+releaseNS+".svc."+node.ClusterDomain)
	}
	pair, err := ca.Issue(release, hosts, now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return listenerCA{ca: ca, pair: pair}
}

// installChart installs the chart as a platform team would with a TLS
// Secret of its own: two replicas, the webhooks, the deployment API and its
// NetworkPolicy (the API server's calls come from the node's address), and
// waits for the rollout.
func installChart(t *testing.T, tls listenerCA, extra ...string) {
	t.Helper()
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNS}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bloodraven-auxiliary-tls", Namespace: releaseNS},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": tls.pair.CertPEM, "tls.key": tls.pair.KeyPEM, "ca.crt": tls.ca.CertPEM},
	}
	if _, err := kube.CoreV1().Secrets(releaseNS).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	args := []string{
		"helm install " + release + " charts/bloodraven --namespace " + releaseNS,
		"--set replicas=2",
		"--set auxiliary.deployAPI.enabled=true",
		"--set auxiliary.deployAPI.networkPolicy.enabled=true",
		"--set 'auxiliary.deployAPI.networkPolicy.apiServerSources[0].ipBlock.cidr=" + node.NodeIP + "/32'",
		"--set webhooks.caBundle=" + base64.StdEncoding.EncodeToString(tls.ca.CertPEM),
	}
	args = append(args, extra...)
	sh(t, 3*time.Minute, strings.Join(args, " "))
	sh(t, 4*time.Minute, fmt.Sprintf("kubectl --namespace %s rollout status deployment/%s --timeout=4m", releaseNS, release))
}

// deleteNamespace deletes ns (its Pods first: a NetworkPolicy may go before
// the Pods it guards otherwise) and waits until it is gone.
func deleteNamespace(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	_ = kube.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	if err := kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		_, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("namespace %s still exists after 3 minutes: %v", ns, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// applyQuickstartGroup creates the README quickstart's namespace orders,
// labelled for the deployment API, with examples/quickstart/orders.yaml.
func applyQuickstartGroup(t *testing.T) {
	t.Helper()
	sh(t, time.Minute, "kubectl create namespace orders && kubectl label namespace orders shipstream.io/mysql-client=true")
	sh(t, time.Minute, "kubectl apply -f examples/quickstart/orders.yaml")
}

// installed is the release the suite's tests share (ensureChart): each
// test that needs the chart as a platform team installs it uses it, a test
// that needs another release uninstalls it first.
var installed *listenerCA

// ensureChart installs the chart (installChart) unless the suite already
// did, with the quickstart's group in namespace orders as helm test's
// namespace, and returns the listener's CA.
func ensureChart(t *testing.T) listenerCA {
	t.Helper()
	if installed != nil {
		return *installed
	}
	tls := newListenerCA(t)
	installChart(t, tls, "--set tests.namespace=orders")
	applyQuickstartGroup(t)
	installed = &tls
	return tls
}

func TestTheChartInstallsAndHelmTestPassesWithAGroupPresent(t *testing.T) {
	ensureChart(t)
	out := sh(t, 3*time.Minute, "helm test "+release+" --namespace "+releaseNS+" --logs --timeout=2m")
	t.Logf("helm test:\n%s", tail(out, 40))
	for _, check := range []string{"ok   status:", "ok   webhooks:", "ok   status-guard:"} {
		if !strings.Contains(out, check) {
			t.Errorf("helm test's logs lack %q (a check failed or was skipped although namespace orders has a group):\n%s", check, out)
		}
	}
}
