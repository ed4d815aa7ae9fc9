package nodesuite

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"k8s.io/client-go/kubernetes"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/shipstream/bloodraven/internal/node"
	"github.com/shipstream/bloodraven/internal/ociimage"
)

// The suite's node, shared by every test (TestMain).
var (
	root string
	nd   *node.Node
	kube kubernetes.Interface
	// work holds the suite's files: the node's state, helm's homes.
	work string
)

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	ctrllog.SetLogger(logr.Discard())
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "nodesuite: the node suite prepares the host (bridge, iptables, cgroups) and needs root")
		return 1
	}
	var err error
	root, err = filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodesuite:", err)
		return 1
	}
	images := []node.Image{
		{Tarball: filepath.Join(root, "bin", "image", "bloodraven.tar")},
		{Tarball: filepath.Join(root, "bin", "image", "bloodraven-deploy.tar")},
	}
	for _, im := range images {
		if _, err := os.Stat(im.Tarball); err != nil {
			fmt.Fprintf(os.Stderr, "nodesuite: %v (make image builds it)\n", err)
			return 1
		}
	}
	work, err = os.MkdirTemp("", "bloodraven-nodesuite-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodesuite:", err)
		return 1
	}
	defer os.RemoveAll(work)
	probe, err := buildProbeImage()
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodesuite: probe image:", err)
		return 1
	}
	images = append(images, node.Image{Tarball: probe})
	layout := node.Layout{Root: root, StateDir: filepath.Join(work, "node")}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	start := time.Now()
	nd, err = node.Up(ctx, node.Config{Layout: layout, Images: images, Log: os.Stderr})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodesuite: node up:", err)
		dumpLogs(layout)
		return 1
	}
	fmt.Fprintf(os.Stderr, "nodesuite: node up in %.1f s\n", time.Since(start).Seconds())
	kube = nd.Kube
	code := m.Run()
	if code != 0 {
		dumpLogs(layout)
	}
	if err := nd.Down(); err != nil {
		fmt.Fprintln(os.Stderr, "nodesuite: node down:", err)
		code = 1
	}
	if left := node.Leftovers(layout); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "nodesuite: the node left on this machine: %s\n", strings.Join(left, "; "))
		code = 1
	}
	return code
}

// ProbeImage is the image of ./probe, built and imported by TestMain.
const ProbeImage = "localhost/bloodraven-nodesuite/probe:1"

// buildProbeImage builds ./probe as a static binary in a one-layer image
// and writes it as a tarball under work.
func buildProbeImage() (string, error) {
	bin := filepath.Join(work, "probe")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./probe: %w: %s", err, out)
	}
	img, err := ociimage.Build(ociimage.Spec{Binary: bin, Name: "probe", Version: "1",
		Description: "the node suite's network probe (e2e/node/probe)", Args: []string{"sleep"}})
	if err != nil {
		return "", err
	}
	ref, err := name.ParseReference(ProbeImage)
	if err != nil {
		return "", err
	}
	path := filepath.Join(work, "probe.tar")
	if err := tarball.WriteToFile(path, ref, img); err != nil {
		return "", err
	}
	return path, nil
}

// dumpLogs prints the tail of each component's log.
func dumpLogs(l node.Layout) {
	logs, _ := filepath.Glob(l.State("logs", "*.log"))
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		fmt.Fprintf(os.Stderr, "---- %s (tail)\n%s\n", filepath.Base(f), tail(string(b), 12))
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// sh runs a command line with the node's kubeconfig, helm's homes under
// work and bin/ first on PATH, and returns its combined output; it fails
// the test when the command fails.
func sh(t *testing.T, timeout time.Duration, line string) string {
	t.Helper()
	out, err := shErr(timeout, line)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func shErr(timeout time.Duration, line string) (string, error) {
	return tools().Run(context.Background(), timeout, line)
}
