package pki

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestIssuedCertificateVerifiesForEveryHost(t *testing.T) {
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	ca, err := NewCA("test-ca", now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Issue("server", []string{"localhost", "127.0.0.1", "::1"}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		t.Fatalf("key pair does not load: %v", err)
	}
	leaf, err := x509.ParseCertificate(kp.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	tests := map[string]struct {
		host    string
		wantErr bool
	}{
		"dns name":           {host: "localhost"},
		"ipv4 address":       {host: "127.0.0.1"},
		"ipv6 address":       {host: "::1"},
		"host not requested": {host: "example.com", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := leaf.Verify(x509.VerifyOptions{DNSName: tc.host, Roots: roots, CurrentTime: now})
			if (err != nil) != tc.wantErr {
				t.Fatalf("verify %s: err=%v, wantErr=%v", tc.host, err, tc.wantErr)
			}
		})
	}
}

func TestWriteTLSDirWritesKubernetesLayoutWithPrivateKey(t *testing.T) {
	now := time.Now()
	ca, err := NewCA("test-ca", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Issue("server", []string{"localhost"}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "tls")
	if err := pair.WriteTLSDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")); err != nil {
		t.Fatalf("written pair does not load: %v", err)
	}
	st, err := os.Stat(filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("tls.key mode = %v, want 0600", st.Mode().Perm())
	}
}
