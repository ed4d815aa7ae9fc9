package mysql

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	gomysql "github.com/go-sql-driver/mysql"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// Account is what the driver connects to a group's sites with: the MySQL
// account and, when the group's spec.tls requires it, the TLS material.
type Account struct {
	User, Password string
	// TLS is nil for plaintext connections.
	TLS *TLSMaterial
}

// TLSMaterial is the PEM the group's spec.tls names.
type TLSMaterial struct {
	// CA holds the certificates a site's server certificate must chain to.
	CA []byte
	// ClientCert and ClientKey, both or neither: the certificate the
	// driver presents.
	ClientCert, ClientKey []byte

	fpOnce sync.Once
	fp     string
}

// Static is a Credentials that always answers a: for tests and for tools
// that hold one account.
func Static(a Account) Credentials {
	return func(context.Context, *bloodravenv1alpha1.MysqlFailoverGroup) (Account, error) { return a, nil }
}

// TLSRequired reports whether g's connections must be TLS.
func TLSRequired(g *bloodravenv1alpha1.MysqlFailoverGroup) bool {
	t := g.Spec.TLS
	return t != nil && (t.Mode == "" || t.Mode == bloodravenv1alpha1.DatabaseTLSRequired)
}

// errTLSNotConfigured: the group requires TLS and its account came without
// TLS material (a Credentials that does not read spec.tls).
var errTLSNotConfigured = errors.New("spec.tls requires TLS but the account has no CA: the driver refuses to connect in plaintext")

// config is the tls.Config for one site: its certificate must chain to the
// CA and name serverName (the site's host, a DNS name or an IP address).
// TLS 1.2 is the oldest version offered.
func (m *TLSMaterial) config(serverName string) (*tls.Config, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(m.CA) {
		return nil, errors.New("spec.tls: the CA Secret's ca.crt holds no PEM certificate")
	}
	c := &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}
	switch {
	case len(m.ClientCert) > 0 || len(m.ClientKey) > 0:
		pair, err := tls.X509KeyPair(m.ClientCert, m.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("spec.tls: the client certificate Secret's tls.crt and tls.key: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// fingerprint identifies the material (a hash, never the material): a pool
// whose material changed is replaced. Computed once per material (the
// cache hands the same one to every open until it reads the Secrets again).
func (m *TLSMaterial) fingerprint() string {
	m.fpOnce.Do(func() {
		h := sha256.New()
		for _, b := range [][]byte{m.CA, m.ClientCert, m.ClientKey} {
			fmt.Fprintf(h, "%d:", len(b))
			h.Write(b)
		}
		m.fp = hex.EncodeToString(h.Sum(nil))
	})
	return m.fp
}

// tlsRejected reports whether err is a site's certificate failing
// verification, or a site that offers no TLS: the CA Secret may have been
// rotated, so the cached account is read again.
func tlsRejected(err error) bool {
	var (
		unknown   x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verifyErr *tls.CertificateVerificationError
	)
	return errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		errors.As(err, &verifyErr) || errors.Is(err, gomysql.ErrNoTLS)
}
