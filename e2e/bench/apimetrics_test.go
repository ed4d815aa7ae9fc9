package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const requestTotal = "apiserver_request_total"

// apiCounts are the kube-apiserver's request counters at one scrape.
type apiCounts struct {
	// Requests is apiserver_request_total summed over every label set,
	// except requests for /metrics itself if the API server counts them.
	Requests float64
	// TokenReviews is the TokenReview creates among them.
	TokenReviews float64
	// Scrapes is what the API server counted of /metrics requests.
	// kube-apiserver 1.37 does not instrument /metrics (non-resource
	// requests it does count carry their path in the subresource label),
	// so this stays zero and nothing needs subtracting; should a version
	// count them, they are left out here rather than subtracted.
	Scrapes float64
	// ByKind is Requests by "VERB resource[/subresource]".
	ByKind map[string]float64
}

func (a apiCounts) sub(b apiCounts) apiCounts {
	d := apiCounts{Requests: a.Requests - b.Requests, TokenReviews: a.TokenReviews - b.TokenReviews, Scrapes: a.Scrapes - b.Scrapes,
		ByKind: map[string]float64{}}
	for k, v := range a.ByKind {
		if v -= b.ByKind[k]; v != 0 {
			d.ByKind[k] = v
		}
	}
	return d
}

// kinds lists ByKind per n (per group, per failover), largest first, those
// of at least 0.05.
func (a apiCounts) kinds(n float64) string {
	type kv struct {
		k string
		v float64
	}
	var out []kv
	for k, v := range a.ByKind {
		if v/n >= 0.05 {
			out = append(out, kv{k, v / n})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].v > out[j].v })
	var b strings.Builder
	for i, e := range out {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.2f", e.k, e.v)
	}
	return b.String()
}

// scrape reads the API server's /metrics. Only apiserver_request_total's
// lines are parsed (the whole exposition is megabytes).
func scrape(ctx context.Context) (apiCounts, error) {
	raw, err := env.Kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return apiCounts{}, fmt.Errorf("scrape kube-apiserver /metrics: %w", err)
	}
	var fam bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, requestTotal+"{") || strings.HasPrefix(line, requestTotal+" ") ||
			strings.HasPrefix(line, "# HELP "+requestTotal+" ") || strings.HasPrefix(line, "# TYPE "+requestTotal+" ") {
			fam.WriteString(line)
			fam.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return apiCounts{}, fmt.Errorf("read /metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(&fam)
	if err != nil {
		return apiCounts{}, fmt.Errorf("parse %s: %w", requestTotal, err)
	}
	f, ok := fams[requestTotal]
	if !ok || len(f.GetMetric()) == 0 {
		return apiCounts{}, fmt.Errorf("/metrics has no %s", requestTotal)
	}
	c := apiCounts{ByKind: map[string]float64{}}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		v := m.GetCounter().GetValue()
		if m.GetCounter() == nil {
			v = m.GetUntyped().GetValue()
		}
		if labels["subresource"] == "/metrics" {
			c.Scrapes += v
			continue
		}
		c.Requests += v
		kind := labels["verb"] + " " + labels["resource"]
		if sub := labels["subresource"]; sub != "" {
			kind += "/" + sub
		}
		c.ByKind[kind] += v
		if labels["resource"] == "tokenreviews" && strings.EqualFold(labels["verb"], "POST") {
			c.TokenReviews += v
		}
	}
	return c, nil
}
