package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shipstream/bloodraven/internal/pki"
	"github.com/shipstream/bloodraven/internal/testenv"
)

func runtimeGosched() { runtime.Gosched(); time.Sleep(time.Millisecond) }

func TestTLSListenerOptionsParsesAddress(t *testing.T) {
	tests := map[string]struct {
		addr     string
		wantHost string
		wantPort int
		wantErr  bool
	}{
		"default all interfaces": {addr: ":8443", wantPort: 8443},
		"loopback":               {addr: "127.0.0.1:9443", wantHost: "127.0.0.1", wantPort: 9443},
		"no port":                {addr: "localhost", wantErr: true},
		"port out of range":      {addr: ":70000", wantErr: true},
		"port zero":              {addr: ":0", wantErr: true},
		"port not a number":      {addr: ":https", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o, err := TLSListenerOptions(tc.addr, "/certs")
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if o.Host != tc.wantHost || o.Port != tc.wantPort || o.CertDir != "/certs" || o.CertName != "tls.crt" || o.KeyName != "tls.key" {
				t.Fatalf("options = %+v", o)
			}
		})
	}
}

func freePort(t *testing.T) int { return testenv.FreePort(t) }

// The TLS listener must pick up a rotated certificate without a restart, and
// must speak HTTP/1.1 to clients that offer only it.
func TestTLSListenerReloadsRotatedCertificate(t *testing.T) {
	now := time.Now()
	ca, err := pki.NewCA("test-ca", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	first, err := ca.Issue("first", []string{"127.0.0.1"}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.WriteTLSDir(dir); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	opts, err := TLSListenerOptions(fmt.Sprintf("127.0.0.1:%d", port), dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewTLSServer(opts)
	srv.Register("/hello", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Proto)
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server stopped with %v", err)
		}
	}()

	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	servedCN := func() (string, error) {
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}})
		if err != nil {
			return "", err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
	}
	waitFor(t, 20*time.Second, func() bool { cn, err := servedCN(); return err == nil && cn == "first" })

	// An HTTP/1.1-only client gets an answer.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: false}}
	resp, err := hc.Get(fmt.Sprintf("https://127.0.0.1:%d/hello", port))
	if err != nil {
		t.Fatalf("HTTP/1.1 request: %v", err)
	}
	resp.Body.Close()
	if !strings.HasPrefix(resp.Proto, "HTTP/1.1") || resp.StatusCode != http.StatusOK {
		t.Fatalf("proto %s status %d", resp.Proto, resp.StatusCode)
	}

	second, err := ca.Issue("second", []string{"127.0.0.1"}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := second.WriteTLSDir(dir); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitFor(t, 30*time.Second, func() bool { cn, err := servedCN(); return err == nil && cn == "second" })
	t.Logf("rotated certificate served after %v", time.Since(start).Round(time.Millisecond))
}

func waitFor(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestCertificateExpiryIsReadAtEveryScrape(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA("test CA", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	g := CertificateExpiry(dir)
	if v := testutil.ToFloat64(g); !math.IsNaN(v) {
		t.Fatalf("no certificate yet: %v, want NaN", v)
	}
	for _, validity := range []time.Duration{48 * time.Hour, 90 * 24 * time.Hour} {
		now := time.Now()
		pair, err := ca.Issue("bloodraven", []string{"localhost"}, now, validity)
		if err != nil {
			t.Fatal(err)
		}
		if err := pair.WriteTLSDir(dir); err != nil {
			t.Fatal(err)
		}
		if got, want := testutil.ToFloat64(g), float64(now.Add(validity).Unix()); math.Abs(got-want) > 1 {
			t.Fatalf("expiry %v, want %v (the certificate valid for %s)", got, want, validity)
		}
	}
}
