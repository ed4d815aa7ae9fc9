package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	appsv1 "k8s.io/api/apps/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/shipstream/bloodraven/internal/testenv"
)

// The chart sets the operator's flags and environment from its values:
// rendered with every tuning value changed, the container's arguments and
// literal environment parse, and each value arrives. A flag the chart names
// that the operator does not know fails here, not in a crash-looping pod.
func TestTheChartsArgumentsReachTheOperator(t *testing.T) {
	helm := filepath.Join(testenv.RepoRoot(), "bin", "helm")
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("%s missing: run `make tools`", helm)
	}
	dir := t.TempDir()
	cmd := exec.Command(helm, "template", "bloodraven", filepath.Join(testenv.RepoRoot(), "charts", "bloodraven"), "--namespace", "bloodraven",
		"--show-only", "templates/deployment.yaml",
		"--set", "logLevel=debug", "--set", "operator.probeInterval=5s", "--set", "operator.primaryProbeInterval=500ms",
		"--set", "operator.groupWorkers=32", "--set", "operator.kubeAPIQPS=800", "--set", "operator.kubeAPIBurst=1600",
		"--set", "operator.controllerAPIQPS=400", "--set", "operator.controllerAPIBurst=800",
		"--set", "operator.gracefulShutdownTimeout=45s", "--set", "watchNamespaces={team-a}",
		"--set", "auxiliary.deployAPI.enabled=true", "--set", "auxiliary.deployAPI.networkPolicy.apiServerSources[0].ipBlock.cidr=10.0.0.10/32",
		"--set", "auxiliary.deployAPI.perIdentity.rate=30", "--set", "auxiliary.deployAPI.perIdentity.burst=60",
		"--set", "auxiliary.deployAPI.perIdentity.inFlight=6", "--set", "auxiliary.deployAPI.perIdentity.heldGets=3",
		"--set", "extraArgs[0]=--zap-encoder=console")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+dir, "HELM_CONFIG_HOME="+dir, "HELM_DATA_HOME="+dir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm template: %v: %s", err, errb.String())
	}
	var d appsv1.Deployment
	if err := utilyaml.NewYAMLOrJSONDecoder(&out, 4096).Decode(&d); err != nil {
		t.Fatal(err)
	}
	c := d.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		} else {
			env[e.Name] = "from-" + e.Name // the downward API's, in a pod
		}
	}
	o, err := parseOptions(c.Args, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatalf("the chart's arguments %q do not parse: %v", c.Args, err)
	}
	checks := []struct {
		name string
		ok   bool
	}{
		{"--zap-log-level=debug", o.zap.Level != nil && o.zap.Level.Enabled(zapcore.DebugLevel)},
		{"--zap-encoder=console (extraArgs)", o.zap.NewEncoder != nil},
		{"--probe-interval=5s", o.probeInterval == 5*time.Second},
		{"--primary-probe-interval=500ms", o.primaryProbeInterval == 500*time.Millisecond},
		{"--group-workers=32", o.groupWorkers == 32},
		{"--kube-api-qps=800 --kube-api-burst=1600", o.kubeQPS == 800 && o.kubeBurst == 1600},
		{"--controller-api-qps=400 --controller-api-burst=800", o.controllerQPS == 400 && o.controllerBurst == 800},
		{"--graceful-shutdown-timeout=45s", o.shutdownTimeout == 45*time.Second},
		{"--watch-namespaces=team-a", strings.Join(o.watchNamespaces, ",") == "team-a"},
		{"--deploy-api-{rate,burst,inflight,held-gets}-per-identity=30,60,6,3", o.deployAPI && o.deployFairShare.Rate == 30 &&
			o.deployFairShare.Burst == 60 && o.deployFairShare.InFlight == 6 && o.deployFairShare.HeldGets == 3},
		{"the operator's identity from the chart", o.operatorIdentity == "system:serviceaccount:bloodraven:bloodraven"},
		// The chart's default: the plain endpoint names every tenant's groups.
		{"--metrics-secure (metrics.secure, the chart's default)", o.metricsSecure},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s did not arrive: %+v", c.name, o)
		}
	}
}
