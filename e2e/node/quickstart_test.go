package nodesuite

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1image "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/e2e/e2etest"
	"github.com/shipstream/bloodraven/internal/clusterenv"
	"github.com/shipstream/bloodraven/internal/mariadblocal"
	"github.com/shipstream/bloodraven/internal/node"
	"github.com/shipstream/bloodraven/internal/ociimage"
	"github.com/shipstream/bloodraven/internal/pki"
	"github.com/shipstream/bloodraven/internal/testenv"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
)

// resetRelease uninstalls the suite's shared release, if any, and deletes
// its namespace and the quickstart's: the next test starts as a new user.
//
// The groups go first, while the operator runs: their finalizer is the
// operator's, and a group left after the release would keep its namespace
// terminating for ever.
func resetRelease(t *testing.T) {
	t.Helper()
	deleteNamespace(t, "orders")
	if out, err := shErr(time.Minute, "helm status "+release+" --namespace "+releaseNS); err == nil {
		sh(t, 3*time.Minute, "helm uninstall "+release+" --namespace "+releaseNS+" --wait --timeout=2m")
	} else if !strings.Contains(out, "not found") {
		t.Fatalf("helm status: %v", err)
	}
	installed = nil
	deleteNamespace(t, releaseNS)
}

// quickstartLine says how the node suite runs the README quickstart lines
// it matches: rewrite adapts a line to this machine (each says why), run
// replaces it (only for what this machine has no counterpart of).
type quickstartLine struct {
	match   *regexp.Regexp
	why     string
	rewrite func(string) string
	run     func(t *testing.T, line string)
	used    int
}

// The README quickstart, run for real on the node: the chart from make
// image's images, rolled out, helm test, the quickstart's group over two
// real MariaDB sites, and its first migration as the README's Job, whose
// Pod calls https://bloodraven.bloodraven.svc:8443 by name (CoreDNS,
// kube-proxy) with its kubelet-projected token; the Job completes and its
// DeployRun says succeeded. What this machine lacks (a registry,
// cert-manager, the example hosts) is replaced by its counterpart here,
// each replacement named below; no line is skipped.
func TestTheREADMEQuickstartRunsOnTheNode(t *testing.T) {
	resetRelease(t)
	ctx := context.Background()
	qs := filepath.Join(work, "quickstart")
	if err := os.MkdirAll(qs, 0o755); err != nil {
		t.Fatal(err)
	}
	ports := [2]int{testenv.FreePort(t), testenv.FreePort(t)}
	// The account orders.yaml's Secret names, on sites that offer TLS with
	// certificates from the CA the quickstart gives the group.
	siteCA, err := pki.NewCA("orders-mysql-ca", time.Now(), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(qs, "mysql-ca.crt"), siteCA.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	sites, err := clusterenv.StartSitesWithTLS(ctx, t.TempDir(), ports, "bloodraven", "change-me", siteCA)
	for _, s := range sites {
		t.Cleanup(s.Kill)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the Job's image %s: built and imported", importJobImage(t))
	tls, err := clusterenv.NewListenerCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	helmSet := regexp.MustCompile(`--set certManager\.enabled=true`)
	apiSources := regexp.MustCompile(`ipBlock\.cidr=[0-9./]+`)
	lines := []*quickstartLine{
		{match: regexp.MustCompile(`^make image$`)},
		{match: regexp.MustCompile(`^crane push \S+ \S+$`), why: "no registry: the image is imported into the node's containerd under the pushed name",
			run: func(t *testing.T, line string) {
				f := strings.Fields(line)
				importAs(t, filepath.Join(root, f[2]), f[3])
			}},
		{match: regexp.MustCompile(`^helm install bloodraven charts/bloodraven --namespace bloodraven --create-namespace `),
			why: "no cert-manager: the listener's Secret is made beforehand (existingSecret) and its CA given as the webhooks' caBundle; the API server calls the webhooks from the node's address",
			rewrite: func(line string) string {
				if err := clusterenv.CreateTLSSecret(ctx, kube, tls); err != nil {
					t.Fatal(err)
				}
				line = helmSet.ReplaceAllString(line, "--set webhooks.caBundle="+base64.StdEncoding.EncodeToString(tls.CA.CertPEM))
				return apiSources.ReplaceAllString(line, "ipBlock.cidr="+node.NodeIP+"/32")
			}},
		{match: regexp.MustCompile(`^kubectl .*rollout status `)},
		{match: regexp.MustCompile(`^helm test `)},
		{match: regexp.MustCompile(`^kubectl (create|label) namespace orders`)},
		{match: regexp.MustCompile(`^kubectl --namespace orders create secret generic orders-mysql-ca --from-file=ca\.crt=mysql-ca\.crt$`),
			why: "the sites' CA is the test's: mysql-ca.crt is written to the test's directory",
			rewrite: func(line string) string {
				return strings.Replace(line, "=mysql-ca.crt", "="+filepath.Join(qs, "mysql-ca.crt"), 1)
			}},
		{match: regexp.MustCompile(`^kubectl apply -f examples/quickstart/orders\.yaml$`),
			why: "the group's sites are this machine's MariaDB servers on the node's address (the file says to replace the hosts)",
			rewrite: func(string) string {
				return fmt.Sprintf("sed -e 's/orders-db.iad.example.internal, port: 3306/%s, port: %d/' -e 's/orders-db.pdx.example.internal, port: 3306/%s, port: %d/' examples/quickstart/orders.yaml | kubectl apply -f -",
					node.NodeIP, ports[0], node.NodeIP, ports[1])
			}},
		{match: regexp.MustCompile(`^kubectl --namespace orders get mysqlfailovergroup orders$`),
			run: func(t *testing.T, line string) {
				waitBootstrapped(t, "orders", "orders")
				t.Logf("$ %s\n%s", line, sh(t, time.Minute, line))
			}},
		{match: regexp.MustCompile(`^kubectl --namespace bloodraven get secret bloodraven-ca `),
			why: "no cert-manager: the CA is the one in the listener's Secret; ca.crt is written to the test's directory",
			rewrite: func(line string) string {
				line = strings.Replace(line, "secret bloodraven-ca", "secret "+clusterenv.TLSSecret, 1)
				return strings.Replace(line, "> ca.crt", "> "+filepath.Join(qs, "ca.crt"), 1)
			}},
		{match: regexp.MustCompile(`^kubectl --namespace orders create configmap bloodraven-ca --from-file=ca.crt$`),
			rewrite: func(line string) string { return line + "=" + filepath.Join(qs, "ca.crt") }},
		{match: regexp.MustCompile(`^kubectl --namespace orders apply -f examples/pipelines/job\.yaml$`)},
		{match: regexp.MustCompile(`^kubectl .*wait --for=condition=complete job/`)},
		{match: regexp.MustCompile(`^kubectl .*logs job/`)},
	}
	var jobLogs string
	for _, line := range e2etest.QuickstartCommands(t, root) {
		var step *quickstartLine
		for _, l := range lines {
			if l.match.MatchString(line) {
				step = l
			}
		}
		if step == nil {
			t.Fatalf("README quickstart line %q: the node suite does not know how to run it; add it here", line)
		}
		step.used++
		if step.why != "" {
			t.Logf("adapted (%s): %s", step.why, line)
		}
		if step.run != nil {
			step.run(t, line)
			continue
		}
		cmdline := line
		if step.rewrite != nil {
			cmdline = step.rewrite(line)
		}
		out, err := shErr(16*time.Minute, cmdline)
		if err != nil {
			if strings.HasPrefix(line, "helm test ") {
				// The README's helm test prints no logs: show its checks.
				logs, _ := shErr(time.Minute, "kubectl --namespace "+releaseNS+" logs "+release+"-test")
				t.Logf("helm test's checks:\n%s", logs)
			}
			t.Fatal(err)
		}
		t.Logf("$ %s\n%s", cmdline, tail(out, 15))
		if strings.Contains(line, " logs job/") {
			jobLogs = out
		}
	}
	for _, l := range lines {
		if l.used == 0 {
			t.Errorf("this test's line %q matches no README quickstart line: the README changed", l.match)
		}
	}
	if !strings.Contains(jobLogs, "migrate up: nothing to apply") {
		t.Errorf("the Job's logs do not show its command ran under bloodraven-deploy:\n%s", jobLogs)
	}
	// The Job's operation is recorded as succeeded.
	c, err := client.New(nd.Admin, client.Options{Scheme: bloodravenscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	var runs bloodravenv1alpha1.DeployRunList
	if err := c.List(ctx, &runs, client.InNamespace("orders")); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range runs.Items {
		t.Logf("DeployRun %s: operation %s, outcome %s, lease %s", r.Name, r.Spec.OperationID, r.Status.Outcome, r.Status.LeaseEnd)
		if r.Spec.OperationID == "orders-migrate-3f9c2e1-118" {
			found = true
			if r.Status.Outcome != bloodravenv1alpha1.DeployRunSucceeded {
				t.Errorf("DeployRun %s: outcome %q, want %q", r.Name, r.Status.Outcome, bloodravenv1alpha1.DeployRunSucceeded)
			}
		}
	}
	if !found {
		t.Errorf("no DeployRun records the Job's operation orders-migrate-3f9c2e1-118 (%d runs)", len(runs.Items))
	}
	installed = &tls
}

// startSites starts a group's two sites with the account user/password
// (clusterenv.StartSites); the test's cleanup kills them.
func startSites(t *testing.T, ports [2]int, user, password string) *mariadblocal.Server {
	t.Helper()
	sites, err := clusterenv.StartSites(context.Background(), t.TempDir(), ports, user, password)
	for _, s := range sites {
		t.Cleanup(s.Kill)
	}
	if err != nil {
		t.Fatal(err)
	}
	return sites[0]
}

// importJobImage builds the image examples/pipelines/job.yaml names: the
// suite's stand-in migration tool (./migrate) with bloodraven-deploy beside
// it, as the Job's comment says to build one; imported under that name.
func importJobImage(t *testing.T) string {
	t.Helper()
	if jobImage != "" {
		return jobImage
	}
	job, err := os.ReadFile(filepath.Join(root, "examples", "pipelines", "job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s+image:\s*(\S+)\s*$`).FindSubmatch(job)
	if m == nil {
		t.Fatal("examples/pipelines/job.yaml names no image")
	}
	ref := string(m[1])
	bin := filepath.Join(t.TempDir(), "migrate")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./migrate")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./migrate: %v\n%s", err, out)
	}
	img, err := ociimage.Build(ociimage.Spec{Binary: bin, Name: "migrate", Version: "1",
		Description: "the node suite's migration image: a stand-in tool and bloodraven-deploy",
		Also:        map[string]string{"bloodraven-deploy": filepath.Join(root, "bin", "image", "bloodraven-deploy-linux-amd64")}})
	if err != nil {
		t.Fatal(err)
	}
	importImage(t, img, ref)
	jobImage = ref
	return ref
}

// jobImage is the image importJobImage imported.
var jobImage string

// importAs imports a docker-archive tarball and names its image ref in the
// node's containerd: what pushing it to the cluster's registry would do.
func importAs(t *testing.T, tarballPath, ref string) {
	t.Helper()
	img, err := tarball.ImageFromPath(tarballPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	importImage(t, img, ref)
}

// importImage imports img into the node's containerd under ref.
func importImage(t *testing.T, img v1image.Image, ref string) {
	t.Helper()
	parsed, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "image.tar")
	if err := tarball.WriteToFile(path, parsed, img); err != nil {
		t.Fatal(err)
	}
	if err := nd.ImportImage(context.Background(), path); err != nil {
		t.Fatal(err)
	}
}

// waitBootstrapped waits until the group is bootstrapped
// (clusterenv.WaitBootstrapped).
func waitBootstrapped(t *testing.T, ns, group string) {
	t.Helper()
	c, err := client.New(nd.Admin, client.Options{Scheme: bloodravenscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := clusterenv.WaitBootstrapped(context.Background(), c, client.ObjectKey{Namespace: ns, Name: group}, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
}
