// Command rulecheck is the project's promtool-style check of its alerting
// rules and dashboard: it parses a Prometheus rule file with Prometheus's
// own rulefmt (the validation `promtool check rules` runs: YAML shape, PromQL
// of every expression, label and annotation templates) and the PromQL of a
// Grafana dashboard's targets, and prints every metric name they use, one
// per line, so that a test can check each against a live /metrics.
//
// With -cases it also evaluates every alert against input series, as
// `promtool test rules` does: each alert must fire when its case says and
// stay quiet otherwise.
//
//	rulecheck [-dashboard dashboard.json] [-cases cases.yaml] rules.yaml
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sort"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

func main() {
	dashboard := flag.String("dashboard", "", "a Grafana dashboard JSON whose targets' expressions are checked too")
	cases := flag.String("cases", "", "a file of alert cases (series, and when each alert must fire and must not) evaluated against the rules; every alert needs one")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: rulecheck [-dashboard dashboard.json] [-cases cases.yaml] rules.yaml")
		os.Exit(2)
	}
	names := map[string]bool{}
	groups, errs := rulefmt.ParseFile(flag.Arg(0), false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		fmt.Fprintf(os.Stderr, "%s: %v\n", flag.Arg(0), err)
	}
	if len(errs) > 0 {
		os.Exit(1)
	}
	rules := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			rules++
			if err := collect(r.Expr, names); err != nil {
				fmt.Fprintf(os.Stderr, "%s: rule %s%s: %v\n", flag.Arg(0), r.Alert, r.Record, err)
				os.Exit(1)
			}
		}
	}
	if rules == 0 {
		fmt.Fprintf(os.Stderr, "%s: no rules\n", flag.Arg(0))
		os.Exit(1)
	}
	if *cases != "" {
		if errs := runCases(*cases, groups); len(errs) > 0 {
			for _, err := range errs {
				fmt.Fprintf(os.Stderr, "%s: %v\n", *cases, err)
			}
			os.Exit(1)
		}
	}
	if *dashboard != "" {
		if err := checkDashboard(*dashboard, names); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", *dashboard, err)
			os.Exit(1)
		}
	}
	out := make([]string, 0, len(names))
	for n := range names {
		out = append(out, n)
	}
	sort.Strings(out)
	for _, n := range out {
		fmt.Println(n)
	}
}

var promql = parser.NewParser(parser.Options{})

// collect parses expr and adds the metric names it selects.
func collect(expr string, names map[string]bool) error {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return err
	}
	found := false
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok && vs.Name != "" {
			names[vs.Name] = true
			found = true
		}
		return nil
	})
	if !found {
		return fmt.Errorf("%q selects no metric by name", expr)
	}
	return nil
}

// grafanaVar is a dashboard variable in an expression.
var grafanaVar = regexp.MustCompile(`\$(__rate_interval|__interval|__range|[A-Za-z_][A-Za-z0-9_]*)`)

func checkDashboard(path string, names map[string]bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return fmt.Errorf("not a dashboard: %w", err)
	}
	if len(d.Panels) == 0 {
		return fmt.Errorf("no panels")
	}
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			expr := grafanaVar.ReplaceAllStringFunc(t.Expr, func(v string) string {
				switch v {
				case "$__rate_interval", "$__interval", "$__range":
					return "5m"
				}
				return ".*"
			})
			if err := collect(expr, names); err != nil {
				return fmt.Errorf("panel %q: %w", p.Title, err)
			}
		}
	}
	return nil
}
