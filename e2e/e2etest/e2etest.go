package e2etest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"github.com/go-sql-driver/mysql"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/internal/readonly"
	"github.com/shipstream/bloodraven/internal/testenv"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Playground builds the operator and brings up a playground on free ports
// in a temporary state directory; it is stopped when the test ends.
func Playground(t *testing.T) (*devenv.Playground, devenv.Config) {
	t.Helper()
	return PlaygroundWith(t, nil)
}

// PlaygroundWith is Playground with the configuration passed to configure
// (when not nil) before devenv.Up: every address and both MySQLPorts are
// already chosen, so it can, for example, start fault proxies
// (internal/faultproxy) in front of cfg.MySQLPorts and set cfg.SitePorts to
// theirs. What configure starts and registers with t.Cleanup is cleaned up
// after the playground is stopped.
func PlaygroundWith(t *testing.T, configure func(*devenv.Config)) (*devenv.Playground, devenv.Config) {
	t.Helper()
	root := testenv.RepoRoot()
	cfg := devenv.Config{Root: root, StateDir: t.TempDir(), OperatorBinary: BuildOperator(t, root),
		TLSAddr: testenv.FreeAddr(t), AuxAddr: testenv.FreeAddr(t), MetricsAddr: testenv.FreeAddr(t), ProbeAddr: testenv.FreeAddr(t),
		MySQLPorts: [2]int{testenv.FreePort(t), testenv.FreePort(t)}}
	if configure != nil {
		configure(&cfg)
	}
	p, err := devenv.Up(context.Background(), cfg)
	if err != nil {
		t.Fatalf("playground up: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() { // leave the evidence in the test output
			for _, f := range []string{p.Paths.OperatorLog, filepath.Join(cfg.StateDir, "mysql", "iad", "mariadbd.log"), filepath.Join(cfg.StateDir, "mysql", "pdx", "mariadbd.log")} {
				b, _ := os.ReadFile(f)
				if len(b) > 6000 {
					b = b[len(b)-6000:]
				}
				t.Logf("---- %s:\n%s", f, b)
			}
		}
		if err := p.Down(); err != nil {
			t.Errorf("down: %v", err)
		}
		if bad := UnstructuredLines(p.Paths.OperatorLog); len(bad) > 0 {
			t.Errorf("the operator wrote %d lines that are not one JSON object each (net/http's and the MySQL driver's go through its logger), e.g. %q", len(bad), bad[0])
		}
	})
	return p, cfg
}

// UnstructuredLines are the lines of the log at path that are not one JSON
// object each. A last line cut off by a SIGKILL is not counted.
func UnstructuredLines(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return []string{err.Error()}
	}
	lines := strings.Split(string(b), "\n")
	var bad []string
	for i, l := range lines {
		if strings.TrimSpace(l) == "" || (i == len(lines)-1 && !strings.HasSuffix(string(b), "\n")) {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil {
			bad = append(bad, l)
		}
	}
	return bad
}

// WaitFor is testenv.WaitFor.
var WaitFor = testenv.WaitFor

// BuildOperator builds the operator binary from the checkout at root into
// a temporary directory.
func BuildOperator(t *testing.T, root string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "bloodraven")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/bloodraven")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build operator: %v\n%s", err, b)
	}
	return out
}

// BuildCLI builds bloodraven-deploy (the client module's command) from the
// checkout at root into a temporary directory.
func BuildCLI(t *testing.T, root string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "bloodraven-deploy")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/bloodraven-deploy")
	cmd.Dir = filepath.Join(root, "deployclient")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build bloodraven-deploy: %v\n%s", err, b)
	}
	return out
}

// Samples reads a Prometheus text page and returns its sample lines
// (comments and blank lines left out).
func Samples(t *testing.T, url string) []string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// MetricValue reads one unlabelled sample from a Prometheus text page.
func MetricValue(t *testing.T, url, name string) float64 {
	t.Helper()
	for _, line := range Samples(t, url) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("%s not on %s", name, url)
	return 0
}

// Objects decodes a stream of YAML or JSON documents (helm's output, a
// manifest file) into objects, empty documents left out.
func Objects(t *testing.T, r io.Reader) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// SitesDSN is the root DSN over the unix socket of each of the playground's
// sites: no proxy or port in between.
func SitesDSN(p *devenv.Playground) map[string]string {
	out := map[string]string{}
	for _, s := range p.Sites {
		cfg := mysql.NewConfig()
		cfg.User, cfg.Net, cfg.Addr = "root", "unix", s.Socket()
		cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = readonly.QueryBound, time.Second, time.Second
		out[s.Name] = cfg.FormatDSN()
	}
	return out
}
