package nodesuite

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shipstream/bloodraven/installcheck"
	"github.com/shipstream/bloodraven/internal/node"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
)

// probePod runs the probe image idle in ns with labels, and waits until it
// runs.
func probePod(t *testing.T, ns, name string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: new(int64),
			Containers:                    []corev1.Container{{Name: "probe", Image: ProbeImage, ImagePullPolicy: corev1.PullNever}},
		},
	}
	if _, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sh(t, 2*time.Minute, fmt.Sprintf("kubectl --namespace %s wait --for=condition=Ready pod/%s --timeout=2m", ns, name))
}

// namespace creates ns with labels; the test's cleanup deletes it.
func namespace(t *testing.T, ns string, labels map[string]string) {
	t.Helper()
	if _, err := kube.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteNamespace(t, ns) })
}

// dial is `probe dial` from inside pod ns/name: nil when the connection
// opened within timeout.
func dial(ns, name, addr string, timeout time.Duration) (string, error) {
	return shErr(timeout+30*time.Second, fmt.Sprintf("kubectl --namespace %s exec %s -- /usr/local/bin/probe dial %s %s",
		ns, name, addr, timeout))
}

// expectReach polls (the engine programs a new Pod's rules a moment after
// it starts) until dialling addr from pod ns/name has the wanted outcome,
// then requires it twice more in a row.
func expectReach(t *testing.T, ns, name, addr string, want bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	streak := 0
	var out string
	var err error
	for streak < 3 {
		out, err = dial(ns, name, addr, 3*time.Second)
		if (err == nil) == want {
			streak++
			continue
		}
		if streak > 0 {
			t.Fatalf("%s/%s → %s: %v after it held (flapping): %s", ns, name, addr, want, out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s → %s: want reachable=%v, got: %s (%v)", ns, name, addr, want, strings.TrimSpace(out), err)
		}
		time.Sleep(time.Second)
	}
	t.Logf("%s/%s → %s: reachable=%v (%s)", ns, name, addr, want, strings.TrimSpace(out))
}

// The spec's verification of the deployment API's NetworkPolicy, enforced
// by a real engine (kube-router's firewall; docs/node.md): the TLS port
// admits a Pod only with both the Pod label and its namespace's label, and
// the MySQL sidecars from any namespace; the three plain ports stay open to
// anyone; the API server still reaches the webhooks behind the policy.
func testTheDeployAPINetworkPolicyIsEnforced(t *testing.T) {
	ensureChart(t)
	ctx := context.Background()
	const clientLabel, nsLabel = "bloodraven.shipstream.io/deploy-client", "shipstream.io/mysql-client"
	namespace(t, "np-labelled", map[string]string{nsLabel: "true"})
	namespace(t, "np-unlabelled", nil)
	probePod(t, "np-labelled", "client", map[string]string{clientLabel: "true"})
	probePod(t, "np-labelled", "no-pod-label", nil)
	probePod(t, "np-unlabelled", "client", map[string]string{clientLabel: "true"})
	probePod(t, "np-unlabelled", "sidecar", map[string]string{"app.kubernetes.io/name": "mysql", "app.kubernetes.io/managed-by": "bloodraven"})

	var operators []string
	for _, p := range operatorPodList(t, "") {
		operators = append(operators, p.Status.PodIP)
	}
	if len(operators) != 2 {
		t.Fatalf("want the 2 operator replicas running, got %d", len(operators))
	}
	type peer struct {
		ns, name string
		tls      bool // admitted to the TLS port
	}
	clients := []peer{
		{"np-labelled", "client", true},
		{"np-labelled", "no-pod-label", false},
		{"np-unlabelled", "client", false},
		{"np-unlabelled", "sidecar", true},
	}
	for _, c := range clients {
		// The deployment API by the name its callers use: CoreDNS, then
		// kube-proxy to the leader.
		expectReach(t, c.ns, c.name, "bloodraven.bloodraven.svc:8443", c.tls)
		for _, ip := range operators {
			expectReach(t, c.ns, c.name, net.JoinHostPort(ip, "8443"), c.tls)
			for _, port := range []string{"8080", "8081", "8082"} {
				expectReach(t, c.ns, c.name, net.JoinHostPort(ip, port), true)
			}
		}
	}

	// The API server still calls the webhooks (a bad planned failover is
	// denied by them, not refused for want of an answer), and the rest of
	// helm test's checks hold with the policy in force.
	c, err := client.New(nd.Admin, client.Options{Scheme: bloodravenscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	err = installcheck.Run(ctx, installcheck.Config{
		StatusURL: "http://bloodraven." + releaseNS + ".svc." + node.ClusterDomain + ":8082/status", Namespace: "orders", Client: c,
		HTTP: inClusterHTTP(), Out: &out})
	t.Logf("check-install from the host:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
}

// inClusterHTTP is an HTTP client on this machine that resolves cluster
// names with the cluster's DNS (CoreDNS behind kube-proxy's Service
// address), as a Pod would.
func inClusterHTTP() *http.Client {
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort(node.DNSServiceIP, "53"))
	}}
	dialer := &net.Dialer{Timeout: 5 * time.Second, Resolver: resolver}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dialer.DialContext}}
}
