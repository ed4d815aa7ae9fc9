package main

import (
	"crypto/tls"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// metricsOptions is the /metrics endpoint: plain HTTP by default, or, with
// --metrics-secure, HTTPS with the serving certificate of --tls-cert-dir
// (reloaded on change) behind controller-runtime's authentication and
// authorization filter. The filter reviews the caller's bearer token
// (TokenReview) and asks whether it may get the non-resource URL /metrics
// (SubjectAccessReview); the operator's role grants it both creates, and the
// chart's <release>-metrics-reader ClusterRole is what a scraper is bound to.
// Answers are cached by the filter (allowed 5 min, denied 30 s), so a
// scrape costs no API request once its token was seen.
func metricsOptions(o options) metricsserver.Options {
	m := metricsserver.Options{BindAddress: o.metricsAddr}
	if !o.metricsSecure {
		return m
	}
	m.SecureServing = true
	m.FilterProvider = filters.WithAuthenticationAndAuthorization
	m.CertDir = o.tlsCertDir
	m.TLSOpts = []func(*tls.Config){func(c *tls.Config) {
		c.MinVersion = tls.VersionTLS12
		// HTTP/1.1 only: a scrape needs nothing more, and it keeps the
		// endpoint out of HTTP/2's stream-reset attacks (CVE-2023-44487).
		c.NextProtos = []string{"http/1.1"}
	}}
	return m
}
