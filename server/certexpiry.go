package server

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
)

// CertificateExpiry returns the gauge
// bloodraven_tls_certificate_expiry_timestamp_seconds: the NotAfter of the
// first certificate in certDir/tls.crt, read at every scrape, so that a
// rotated certificate shows at once. NaN when the file cannot be read.
func CertificateExpiry(certDir string) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bloodraven_tls_certificate_expiry_timestamp_seconds",
		Help: "Unix time at which the TLS listener's certificate (webhooks, /deploy/v1) expires; NaN when it cannot be read.",
	}, func() float64 {
		t, err := certificateNotAfter(filepath.Join(certDir, "tls.crt"))
		if err != nil {
			return math.NaN()
		}
		return float64(t)
	})
}

func certificateNotAfter(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return 0, fmt.Errorf("%s: no PEM certificate", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return c.NotAfter.Unix(), nil
}
