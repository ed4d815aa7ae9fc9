package nodesuite

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/clusterenv"
	"github.com/shipstream/bloodraven/internal/ociimage"
	"github.com/shipstream/bloodraven/internal/scene"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
)

// previousRelease is the commit of release 0.1.0: the last one whose chart
// and VERSION said 0.1.0, before 0.2.0's work began (1a8dc48).
const previousRelease = "fbefa29b25087fbcfc842177127c3869cadc77e0"

// checkoutPreviousRelease extracts the previous release's tree (git
// archive) and builds its operator image as make image would, imported
// into the node under the name its chart uses. It returns the tree.
func checkoutPreviousRelease(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("bash", "-o", "pipefail", "-c",
		fmt.Sprintf("git -C %s archive %s | tar -x -C %s", root, previousRelease, dir)).CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s (the node suite needs the checkout's history)", previousRelease, err, out)
	}
	bin := filepath.Join(t.TempDir(), "bloodraven")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version=0.1.0", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the 0.1.0 operator: %v\n%s", err, out)
	}
	img, err := ociimage.Build(ociimage.Spec{Binary: bin, Name: "bloodraven", Version: "0.1.0",
		Description: "Bloodraven 0.1.0, built from " + previousRelease})
	if err != nil {
		t.Fatal(err)
	}
	importImage(t, img, "ghcr.io/shipstream/bloodraven:0.1.0")
	return dir
}

// apiFromHost is a client of the release's deployment API from this
// machine (hostHTTP) with a fresh token of ns/deploy.
func apiFromHost(t *testing.T, ca []byte, ns string) *scene.Client {
	t.Helper()
	token := strings.TrimSpace(sh(t, time.Minute, fmt.Sprintf("kubectl --namespace %s create token deploy --audience bloodraven-deploy --duration 1h", ns)))
	return scene.ForURL(apiURL, hostHTTP(t, ca), token)
}

// apiURL is the release's deployment API by its Service's name.
const apiURL = "https://" + release + "." + releaseNS + ".svc.cluster.local:8443"

// hostHTTP is an HTTP client on this machine for the release's deployment
// API: the leader-only Service's name through the cluster's DNS,
// kube-proxy, the listener's CA (the NetworkPolicy admits the node's own
// addresses).
func hostHTTP(t *testing.T, ca []byte) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("no CA certificate")
	}
	hc := inClusterHTTP()
	tr := hc.Transport.(*http.Transport)
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	// A connection per request: 0.1.0's Service routes to both replicas,
	// and a retry after the follower's 503 must be able to reach the leader.
	tr.DisableKeepAlives = true
	return hc
}

// grantUntil POSTs a migration grant until it is answered 201 (a group
// just bootstrapped, or whose last lease was just revoked, may answer 423
// for a moment) and returns the lease token.
func grantUntil(t *testing.T, api *scene.Client, op string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		r, err := api.Send(http.MethodPost, "/deploy/v1/groups/"+sceneGroup+"/leases",
			map[string]any{"kind": "migration", "operationId": op, "instance": sceneDB, "ttlSeconds": 600})
		if err == nil && r.Status == http.StatusCreated {
			return r.Str("token")
		}
		if time.Now().After(deadline) {
			t.Fatalf("grant %s: %d %s (%v)", op, r.Status, r.Raw, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// renew renews op, sent again, as a client does, while the answer is 503
// not_leader (0.1.0's Service routes to the follower too) or the connection
// is refused (right after a rollout the Service routes to no one yet).
func renew(api *scene.Client, op, token string) (scene.Response, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := api.Send(http.MethodPut, "/deploy/v1/groups/"+sceneGroup+"/leases/migration/"+op,
			map[string]any{"token": token, "ttlSeconds": 600})
		if (err == nil && r.Status != http.StatusServiceUnavailable) || time.Now().After(deadline) {
			return r, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Release 0.1.0 installed from git history, with a live migration lease and
// a tombstone (a revoked operation), upgraded to this checkout's chart as
// docs/upgrading.md says (the CRDs applied first, then helm upgrade
// --reset-then-reuse-values): nothing crash-loops, the live lease still
// renews with its token under the new leader, the revoked operation is
// still refused as revoked, and the DeployRun CRD, new in 0.2.0, exists.
func TestAnUpgradeFromThePreviousReleaseKeepsLeasesAndTombstones(t *testing.T) {
	resetRelease(t)
	ctx := context.Background()
	prev := checkoutPreviousRelease(t)
	ca, err := clusterenv.NewListenerCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := clusterenv.InstallChartFrom(ctx, kube, tools(), ca, filepath.Join(prev, "charts", "bloodraven")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resetRelease(t) })
	rs := newRunScene(t, "upgrade", ca.CA.CertPEM)
	api := apiFromHost(t, ca.CA.CertPEM, rs.ns)

	// A tombstone: an operation revoked by a person (the group's revoke
	// annotation, which 0.1.0 has).
	revokedToken := grantUntil(t, api, "revoked-op")
	c, err := client.New(nd.Admin, client.Options{Scheme: bloodravenscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"upgrade test"}}}`, bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation)
	g := &bloodravenv1alpha1.MysqlFailoverGroup{ObjectMeta: metav1.ObjectMeta{Namespace: rs.ns, Name: sceneGroup}}
	if err := c.Patch(ctx, g, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	expectRevoked := func(when string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			r, err := renew(api, "revoked-op", revokedToken)
			if err == nil && r.Status == http.StatusConflict && r.Str("error") == "revoked" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: renewing the revoked operation answered %d %s (%v), want 409 revoked", when, r.Status, r.Raw, err)
			}
			time.Sleep(time.Second)
		}
	}
	expectRevoked("0.1.0")
	liveToken := grantUntil(t, api, "live-op")
	if r, err := renew(api, "live-op", liveToken); err != nil || r.Status != http.StatusOK {
		t.Fatalf("0.1.0: renewing the live lease: %d %s (%v)", r.Status, r.Raw, err)
	}
	before := leaseNames(t, rs.ns)
	t.Logf("0.1.0: deployment Leases in %s: %v", rs.ns, before)

	// The upgrade, with the commands docs/upgrading.md gives.
	for _, line := range upgradeCommands(t) {
		t.Logf("$ %s\n%s", line, tail(sh(t, 4*time.Minute, line), 10))
	}
	sh(t, 4*time.Minute, fmt.Sprintf("kubectl --namespace %s rollout status deployment/%s --timeout=4m", releaseNS, release))
	after := leaseNames(t, rs.ns)
	t.Logf("0.2.0: deployment Leases in %s: %v", rs.ns, after)
	for _, n := range before {
		if !slices.Contains(after, n) {
			t.Errorf("the upgrade lost the deployment Lease %s", n)
		}
	}
	r, err := renew(api, "live-op", liveToken)
	if err != nil || r.Status != http.StatusOK {
		t.Fatalf("0.2.0: renewing the lease granted by 0.1.0: %d %s (%v)", r.Status, r.Raw, err)
	}
	expectRevoked("0.2.0")
	if out, err := shErr(time.Minute, "kubectl get crd deployruns.bloodraven.shipstream.io"); err != nil {
		t.Errorf("the DeployRun CRD after the upgrade: %v\n%s", err, out)
	}
	// Checked last: a crash loop has had the checks above to show.
	pods, err := kube.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=bloodraven,app.kubernetes.io/component!=test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount > 0 || (cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff") {
				out, _ := shErr(time.Minute, fmt.Sprintf("kubectl --namespace %s logs %s --previous", releaseNS, p.Name))
				t.Errorf("after the upgrade, %s restarted %d times (%+v):\n%s", p.Name, cs.RestartCount, cs.State, tail(out, 30))
			}
		}
		if !strings.HasSuffix(p.Spec.Containers[0].Image, ":0.2.0") {
			t.Errorf("after the upgrade, %s runs %s", p.Name, p.Spec.Containers[0].Image)
		}
	}
	if r, err := api.Send(http.MethodDelete, "/deploy/v1/groups/"+sceneGroup+"/leases/migration/live-op", nil,
		"X-Lease-Token", liveToken); err != nil || r.Status != http.StatusNoContent {
		t.Errorf("0.2.0: releasing the lease granted by 0.1.0: %d %s (%v)", r.Status, r.Raw, err)
	}
}

// leaseNames are the names of ns's Leases (the deployment Leases).
func leaseNames(t *testing.T, ns string) []string {
	t.Helper()
	list, err := kube.CoordinationV1().Leases(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range list.Items {
		names = append(names, l.Name)
	}
	return names
}

// upgradeCommands are docs/upgrading.md's two commands of an upgrade, the
// CRDs' kubectl apply and the helm upgrade, for this release.
func upgradeCommands(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "upgrading.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile("`(kubectl apply [^`]*charts/bloodraven/crds/)`"),
		regexp.MustCompile("`(helm upgrade <release> charts/bloodraven -n <ns> [^`]*)`"),
	} {
		m := re.FindSubmatch(doc)
		if m == nil {
			t.Fatalf("docs/upgrading.md no longer gives a command matching %s", re)
		}
		line := strings.NewReplacer("<release>", release, "<ns>", releaseNS).Replace(string(m[1]))
		if strings.HasPrefix(line, "helm upgrade") {
			line += " --wait --timeout=3m"
		}
		out = append(out, line)
	}
	return out
}
