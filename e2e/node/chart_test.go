package nodesuite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shipstream/bloodraven/internal/clusterenv"
)

const (
	release   = clusterenv.Release
	releaseNS = clusterenv.Namespace
)

// tools runs helm and kubectl against the suite's node.
func tools() clusterenv.Tools {
	return clusterenv.Tools{Root: root, Kubeconfig: nd.Layout().Kubeconfig(), HelmHome: filepath.Join(work, "helm")}
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
var installed *clusterenv.ListenerCA

// ensureChart installs the chart (installChart) unless the suite already
// did, with the quickstart's group in namespace orders as helm test's
// namespace, and returns the listener's CA.
func ensureChart(t *testing.T) clusterenv.ListenerCA {
	t.Helper()
	if installed != nil {
		return *installed
	}
	resetRelease(t) // a test that failed half-way may have left one
	tls, err := clusterenv.NewListenerCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := clusterenv.InstallChart(context.Background(), kube, tools(), tls, "--set tests.namespace=orders"); err != nil {
		t.Fatal(err)
	}
	applyQuickstartGroup(t)
	installed = &tls
	return tls
}

// TestWithTheChartInstalled runs the checks that share one release
// (ensureChart). A run that outlives a kubelet token rotation takes 11
// minutes (the shortest projected token lives 10): it runs beside the
// other checks, which take about 4, rather than after them. The tests that
// install a release of their own (the quickstart, the upgrade) come after
// this one: Go runs a package's top-level tests in file and source order,
// and this file sorts first.
func TestWithTheChartInstalled(t *testing.T) {
	tls := ensureChart(t)
	importJobImage(t) // once, before the parallel checks use it
	t.Run("ARunOutlivesAKubeletTokenRotation", func(t *testing.T) {
		t.Parallel()
		testARunOutlivesAKubeletTokenRotation(t, tls)
	})
	t.Run("Meanwhile", func(t *testing.T) {
		t.Parallel()
		t.Run("TheChartInstallsAndHelmTestPassesWithAGroupPresent", testTheChartInstallsAndHelmTestPassesWithAGroupPresent)
		t.Run("ALeaderPodDeletedDuringARunHandsOverThroughTheService", testALeaderPodDeletedDuringARunHandsOverThroughTheService)
		t.Run("ARollingRestartUnderTenRunsLosesNoLease", testARollingRestartUnderTenRunsLosesNoLease)
		t.Run("TheDeployAPINetworkPolicyIsEnforced", testTheDeployAPINetworkPolicyIsEnforced)
	})
}

func testTheChartInstallsAndHelmTestPassesWithAGroupPresent(t *testing.T) {
	ensureChart(t)
	out := sh(t, 3*time.Minute, "helm test "+release+" --namespace "+releaseNS+" --logs --timeout=2m")
	t.Logf("helm test:\n%s", tail(out, 40))
	for _, check := range []string{"ok   status:", "ok   webhooks:", "ok   status-guard:"} {
		if !strings.Contains(out, check) {
			t.Errorf("helm test's logs lack %q (a check failed or was skipped although namespace orders has a group):\n%s", check, out)
		}
	}
}
