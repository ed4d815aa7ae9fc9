package devenv

import (
	"time"

	"github.com/shipstream/bloodraven/internal/pki"
)

func (p *Playground) writeServingCertificate() error {
	now := time.Now()
	ca, err := pki.NewCA("bloodraven playground CA", now, 30*24*time.Hour)
	if err != nil {
		return err
	}
	pair, err := ca.Issue("bloodraven", []string{"localhost", "127.0.0.1", "::1",
		"bloodraven." + OperatorNamespace + ".svc", "bloodraven." + OperatorNamespace + ".svc.cluster.local"}, now, 30*24*time.Hour)
	if err != nil {
		return err
	}
	if err := pki.WriteFileAtomic(p.Paths.CACert, ca.CertPEM, 0o644); err != nil {
		return err
	}
	return pair.WriteTLSDir(p.Paths.TLSDir)
}
