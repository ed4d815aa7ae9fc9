package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shipstream/bloodraven/internal/pki"
)

// startListener runs a TLSServer with a webhook at /validate and, when
// deploy is set, a deployment API that answers JSON naming the path it got.
func startListener(t *testing.T, deploy bool, tune ...func(*TLSServer)) (addr string, roots *x509.CertPool) {
	t.Helper()
	now := time.Now()
	ca, err := pki.NewCA("test-ca", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pair, err := ca.Issue("listener", []string{"127.0.0.1"}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := pair.WriteTLSDir(dir); err != nil {
		t.Fatal(err)
	}
	addr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	opts, err := TLSListenerOptions(addr, dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewTLSServer(opts)
	for _, f := range tune {
		f(srv)
	}
	srv.Register("/validate", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "webhook") }))
	if deploy {
		srv.HandleDeploy(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body) // as the API reads a body
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "not_found", "path": r.URL.Path})
		}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("listener stopped with %v", err)
		}
	})
	roots = x509.NewCertPool()
	roots.AddCert(ca.Cert)
	waitFor(t, 20*time.Second, func() bool { return srv.StartedChecker()(nil) == nil })
	return addr, roots
}

// rawGet sends path exactly as given (an http.Client may normalize it).
func rawGet(t *testing.T, addr string, roots *x509.CertPool, path string) (*http.Response, []byte) {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// Every path under /deploy/ reaches the deployment API as sent, whatever its
// slashes, "." or ".." segments: never a redirect, never HTML. Other paths
// are the webhooks' mux.
func TestEveryDeployPathReachesTheDeployAPIAsSent(t *testing.T) {
	addr, roots := startListener(t, true)
	for _, path := range []string{
		"/deploy", "/deploy/", "/deploy/v1", "/deploy/v1/", "/deploy/v1//groups/g", "/deploy//v1/groups/g",
		"/deploy/v1/./groups/g", "/deploy/v1/groups/../groups/g", "/deploy/v1/groups/g/", "/deploy/../deploy/v1/groups/g",
		"/elsewhere/../deploy/v1/groups/g",
	} {
		t.Run(path, func(t *testing.T) {
			resp, body := rawGet(t, addr, roots, path)
			var got map[string]string
			if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &got) != nil {
				t.Fatalf("%s: %d %q %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
			if got["path"] != path {
				t.Fatalf("the deployment API saw %q, sent %q", got["path"], path)
			}
		})
	}
	if resp, body := rawGet(t, addr, roots, "/validate"); resp.StatusCode != http.StatusOK || string(body) != "webhook" {
		t.Fatalf("webhook path: %d %s", resp.StatusCode, body)
	}
}

// With the deployment API off, its paths still answer the contract's JSON.
func TestDeployPathsAnswerJSONWhenTheAPIIsOff(t *testing.T) {
	addr, roots := startListener(t, false)
	for _, path := range []string{"/deploy/v1", "/deploy/v1/groups/g", "/deploy/v1//x"} {
		resp, body := rawGet(t, addr, roots, path)
		if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/json" || string(body) != "{\"error\":\"not_found\"}\n" {
			t.Fatalf("%s: %d %q %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
}

// Hostile clients at the listener: a body sent too slowly loses its
// connection at the read timeout, a 1 MiB header is refused with 431, and
// TLS below 1.2 is refused at the handshake.
func TestHostileClientsAreCutOff(t *testing.T) {
	addr, roots := startListener(t, true, func(s *TLSServer) { s.ReadTimeout = 500 * time.Millisecond })
	dial := func() *tls.Conn {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	t.Run("slow body", func(t *testing.T) {
		conn := dial()
		fmt.Fprintf(conn, "POST /deploy/v1/groups/g/leases HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
		start := time.Now()
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := io.ReadAll(conn) // an answer then EOF, or the close
		if took := time.Since(start); took > 3*time.Second || took < 400*time.Millisecond {
			t.Fatalf("the slow body held the connection %v (read timeout 500ms): %v", took, err)
		}
	})
	t.Run("1 MiB header", func(t *testing.T) {
		conn := dial()
		fmt.Fprintf(conn, "GET /deploy/v1/groups/g HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 1<<20))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("1 MiB header: %d", resp.StatusCode)
		}
	})
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		t.Run(tls.VersionName(v), func(t *testing.T) {
			conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, MinVersion: v, MaxVersion: v}) //nolint:gosec // the point
			if err == nil {
				conn.Close()
				t.Fatalf("%s handshake accepted", tls.VersionName(v))
			}
		})
	}
}
