package charts

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// MonitoringMetricNames renders the chart's PrometheusRule and dashboard
// with bin/helm, checks them with bin/rulecheck (Prometheus's rule parser:
// what `promtool check rules` validates, and the dashboard's PromQL) and
// returns every metric name they use. root is the repository; dir receives
// the rendered rule file and dashboard.
func MonitoringMetricNames(root, dir string) ([]string, error) {
	helm := exec.Command(filepath.Join(root, "bin", "helm"), "template", "bloodraven", filepath.Join(root, "charts", "bloodraven"),
		"--namespace", "bloodraven", "--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.dashboard.enabled=true")
	helm.Env = append(os.Environ(), "HELM_CACHE_HOME="+dir, "HELM_CONFIG_HOME="+dir, "HELM_DATA_HOME="+dir)
	var out, errb bytes.Buffer
	helm.Stdout, helm.Stderr = &out, &errb
	if err := helm.Run(); err != nil {
		return nil, fmt.Errorf("helm template: %w: %s", err, errb.String())
	}
	var rules, dashboard []byte
	dec := utilyaml.NewYAMLOrJSONDecoder(&out, 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			break
		}
		switch obj["kind"] {
		case "PrometheusRule":
			spec, _ := obj["spec"].(map[string]any)
			b, err := yaml.Marshal(map[string]any{"groups": spec["groups"]})
			if err != nil {
				return nil, err
			}
			rules = b
		case "ConfigMap":
			if data, ok := obj["data"].(map[string]any); ok {
				if d, ok := data["bloodraven.json"].(string); ok {
					dashboard = []byte(d)
				}
			}
		}
	}
	if rules == nil || dashboard == nil {
		return nil, fmt.Errorf("the render has no PrometheusRule or no dashboard ConfigMap")
	}
	rulesPath, dashPath := filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "dashboard.json")
	if err := os.WriteFile(rulesPath, rules, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(dashPath, dashboard, 0o644); err != nil {
		return nil, err
	}
	return rulecheck(root, "-dashboard", dashPath, rulesPath)
}

// AlertCasesFile is the alert cases of the chart's rules: series, and when
// each alert must fire and must not, at the chart's default thresholds.
const AlertCasesFile = "charts/testdata/alert-cases.yaml"

// CheckAlertCases evaluates the rendered rules at rulesPath against the
// cases file (bin/rulecheck -cases): every alert must have a case and fire
// exactly when its case says.
func CheckAlertCases(root, rulesPath, cases string) error {
	_, err := rulecheck(root, "-cases", cases, rulesPath)
	return err
}

// rulecheck runs bin/rulecheck and returns the metric names it prints.
func rulecheck(root string, args ...string) ([]string, error) {
	var out, errb bytes.Buffer
	check := exec.Command(filepath.Join(root, "bin", "rulecheck"), args...)
	check.Stdout, check.Stderr = &out, &errb
	if err := check.Run(); err != nil {
		return nil, fmt.Errorf("rulecheck (run `make tools` if it is missing): %w: %s", err, errb.String())
	}
	return strings.Fields(out.String()), nil
}
