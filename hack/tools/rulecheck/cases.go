package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	promqlengine "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
	"go.yaml.in/yaml/v3"
)

// caseFile is what -cases reads: for each alert, input series and the times
// at which it must fire and must not, as `promtool test rules` states them
// (series in its expanding notation, one sample per interval from time 0).
type caseFile struct {
	// Interval between samples and between rule evaluations (default 1m).
	Interval model.Duration `yaml:"interval"`
	Cases    []alertCase    `yaml:"cases"`
}

type alertCase struct {
	// Alert names the rule(s); Severity, when set, picks the one with that
	// severity label among rules of the same name.
	Alert    string   `yaml:"alert"`
	Severity string   `yaml:"severity"`
	Series   []string `yaml:"series"`
	// Firing and Quiet are evaluation times (durations from 0).
	Firing []model.Duration `yaml:"firing"`
	Quiet  []model.Duration `yaml:"quiet"`
}

// runCases evaluates every alerting rule of groups against the cases of
// path: every alert must have a case, and a case's alert must fire at each
// of its Firing times and not fire at any of its Quiet times. Alerting
// follows Prometheus: a label set that the expression returns at every
// evaluation for the rule's `for` fires.
func runCases(path string, groups *rulefmt.RuleGroups) []error {
	b, err := os.ReadFile(path)
	if err != nil {
		return []error{err}
	}
	var cf caseFile
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&cf); err != nil {
		return []error{fmt.Errorf("%s: %w", path, err)}
	}
	interval := time.Duration(cf.Interval)
	if interval <= 0 {
		interval = time.Minute
	}
	engine := promqlengine.NewEngine(promqlengine.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	var errs []error
	covered := map[string]bool{}
	for _, c := range cf.Cases {
		rules := pick(groups, c.Alert, c.Severity)
		if len(rules) != 1 {
			errs = append(errs, fmt.Errorf("case %s (severity %q): %d rules match, want 1", c.Alert, c.Severity, len(rules)))
			continue
		}
		covered[c.Alert+"/"+rules[0].Labels["severity"]] = true
		if len(c.Firing) == 0 || len(c.Quiet) == 0 {
			errs = append(errs, fmt.Errorf("case %s: give both firing and quiet times", c.Alert))
			continue
		}
		q, err := load(c.Series, interval)
		if err != nil {
			errs = append(errs, fmt.Errorf("case %s: %w", c.Alert, err))
			continue
		}
		firing, err := evaluate(engine, q, rules[0], interval, c)
		if err != nil {
			errs = append(errs, fmt.Errorf("case %s: %w", c.Alert, err))
			continue
		}
		for _, at := range c.Firing {
			if !firing[time.Duration(at)] {
				errs = append(errs, fmt.Errorf("case %s: not firing at %s", c.Alert, at))
			}
		}
		for _, at := range c.Quiet {
			if firing[time.Duration(at)] {
				errs = append(errs, fmt.Errorf("case %s: firing at %s, want quiet", c.Alert, at))
			}
		}
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" && !covered[r.Alert+"/"+r.Labels["severity"]] {
				errs = append(errs, fmt.Errorf("alert %s (severity %s) has no case in %s", r.Alert, r.Labels["severity"], path))
			}
		}
	}
	return errs
}

func pick(groups *rulefmt.RuleGroups, alert, severity string) []rulefmt.Rule {
	var out []rulefmt.Rule
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == alert && (severity == "" || r.Labels["severity"] == severity) {
				out = append(out, r)
			}
		}
	}
	return out
}

// evaluate runs the rule every interval from 0 to the case's last time and
// returns the times at which it fired.
func evaluate(engine *promqlengine.Engine, q storage.Queryable, r rulefmt.Rule, interval time.Duration, c alertCase) (map[time.Duration]bool, error) {
	var end time.Duration
	for _, at := range append(append([]model.Duration{}, c.Firing...), c.Quiet...) {
		if time.Duration(at)%interval != 0 {
			return nil, fmt.Errorf("time %s is not a multiple of the interval %s", at, interval)
		}
		end = max(end, time.Duration(at))
	}
	activeSince := map[string]time.Duration{}
	firing := map[time.Duration]bool{}
	for at := time.Duration(0); at <= end; at += interval {
		qry, err := engine.NewInstantQuery(context.Background(), q, nil, r.Expr, time.Unix(0, 0).UTC().Add(at))
		if err != nil {
			return nil, err
		}
		res := qry.Exec(context.Background())
		vec, err := res.Vector() // res.Err when the query failed
		qry.Close()
		if err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		for _, s := range vec {
			k := s.Metric.String()
			seen[k] = true
			if _, ok := activeSince[k]; !ok {
				activeSince[k] = at
			}
			if at-activeSince[k] >= time.Duration(r.For) {
				firing[at] = true
			}
		}
		for k := range activeSince {
			if !seen[k] {
				delete(activeSince, k)
			}
		}
	}
	return firing, nil
}

// load makes a queryable of series in promtool's expanding notation, the
// i-th value at i*interval.
func load(series []string, interval time.Duration) (storage.Queryable, error) {
	var all []storage.Series
	for _, desc := range series {
		lset, vals, err := promql.ParseSeriesDesc(desc)
		if err != nil {
			return nil, fmt.Errorf("series %q: %w", desc, err)
		}
		var samples []chunks.Sample
		for i, v := range vals {
			if v.Omitted {
				continue
			}
			samples = append(samples, floatSample{t: (time.Duration(i) * interval).Milliseconds(), f: v.Value})
		}
		all = append(all, storage.NewListSeries(lset, samples))
	}
	return &storage.MockQueryable{MockQuerier: &storage.MockQuerier{
		SelectMockFunction: func(_ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
			var out []storage.Series
			for _, s := range all {
				if matchesAll(s.Labels(), ms) {
					out = append(out, s)
				}
			}
			sort.Slice(out, func(i, j int) bool { return labels.Compare(out[i].Labels(), out[j].Labels()) < 0 })
			return &listSeriesSet{series: out, i: -1}
		},
	}}, nil
}

func matchesAll(l labels.Labels, ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches(l.Get(m.Name)) {
			return false
		}
	}
	return true
}

type listSeriesSet struct {
	series []storage.Series
	i      int
}

func (s *listSeriesSet) Next() bool                        { s.i++; return s.i < len(s.series) }
func (s *listSeriesSet) At() storage.Series                { return s.series[s.i] }
func (s *listSeriesSet) Err() error                        { return nil }
func (s *listSeriesSet) Warnings() annotations.Annotations { return nil }

// floatSample is one float sample of an input series.
type floatSample struct {
	t int64
	f float64
}

func (s floatSample) T() int64                      { return s.t }
func (s floatSample) ST() int64                     { return 0 }
func (s floatSample) F() float64                    { return s.f }
func (s floatSample) H() *histogram.Histogram       { return nil }
func (s floatSample) FH() *histogram.FloatHistogram { return nil }
func (s floatSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s floatSample) Copy() chunks.Sample           { return s }
