package deployclient

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAnswersThatEndALease(t *testing.T) {
	for name, tc := range map[string]struct {
		err        error
		wantCause  Cause // "" = transient: keep trying inside the deadline
		wantReason string
	}{
		"409 revoked ends it with its reason":          {&APIError{Status: 409, Code: CodeRevoked, Reason: "topology_changed", Generation: 4}, CauseRevoked, "topology_changed"},
		"404 not_found ends it":                        {&APIError{Status: 404, Code: CodeNotFound}, CauseExpired, ""},
		"403 token_mismatch ends it":                   {&APIError{Status: 403, Code: CodeTokenMismatch}, CauseTokenMismatch, ""},
		"403 forbidden ends it":                        {&APIError{Status: 403, Code: CodeForbidden}, CauseForbidden, ""},
		"400 bad_request ends it":                      {&APIError{Status: 400, Code: CodeBadRequest}, CauseRejected, ""},
		"423 unstable is not a renewal but not an end": {&APIError{Status: 423, Code: CodeUnstable, RetryAfter: 2 * time.Second}, "", ""},
		"503 not_leader is transient":                  {&APIError{Status: 503, Code: CodeNotLeader}, "", ""},
		"503 unavailable is transient":                 {&APIError{Status: 503, Code: CodeUnavailable}, "", ""},
		"429 is transient":                             {&APIError{Status: 429, Code: "http_429"}, "", ""},
		"401 is transient (a token file mid-rotation)": {&APIError{Status: 401, Code: CodeUnauthenticated}, "", ""},
		"a transport error is transient":               {fmt.Errorf("PUT /x: %w", errors.New("connection reset")), "", ""},
	} {
		t.Run(name, func(t *testing.T) {
			lost := terminalAnswer(KindMigration, tc.err)
			if tc.wantCause == "" {
				if lost != nil || !Transient(tc.err) {
					t.Fatalf("terminal = %+v, Transient = %v; want a transient answer", lost, Transient(tc.err))
				}
				return
			}
			if lost == nil || lost.Cause != tc.wantCause || lost.Reason != tc.wantReason {
				t.Fatalf("terminal = %+v, want cause %s reason %q", lost, tc.wantCause, tc.wantReason)
			}
			if !errors.Is(lost, tc.err) {
				t.Fatalf("the loss does not wrap the answer")
			}
		})
	}
}

func TestTheServerCertificateIsVerifiedAgainstTheCAAndTheHostname(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"group":"g","namespace":"n","activeSite":"iad","topologyGeneration":3,"leases":[]}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	observe := func(server, caFile string) error {
		c, err := New(Config{Server: server, CAFile: caFile, TokenFile: token})
		if err != nil {
			return err
		}
		_, err = c.Observe(context.Background(), "g")
		return err
	}
	// httptest's certificate names 127.0.0.1 and example.com, not localhost.
	if err := observe("https://127.0.0.1:"+port, ca); err != nil {
		t.Fatalf("the right CA and host: %v", err)
	}
	if err := observe("https://localhost:"+port, ca); err == nil || !strings.Contains(err.Error(), "certificate is valid for") {
		t.Fatalf("a host the certificate does not name: %v, want a hostname error", err)
	} else if Transient(err) {
		t.Fatal("an untrusted certificate is not worth retrying")
	}
	if err := observe("https://127.0.0.1:"+port, ""); err == nil || Transient(err) {
		t.Fatalf("the system roots do not trust httptest's CA: %v", err)
	}
	for _, bad := range []string{"http://127.0.0.1:" + port, "https://127.0.0.1:" + port + "/deploy/v1", "127.0.0.1:" + port} {
		if _, err := New(Config{Server: bad, CAFile: ca, TokenFile: token}); err == nil {
			t.Errorf("New(%q) accepted a URL that is not https://host[:port]", bad)
		}
	}
}

// FuzzDecodeAnswer feeds arbitrary error answers to the client's decoder:
// it always returns a classified *APIError and never panics.
func FuzzDecodeAnswer(f *testing.F) {
	f.Add(409, []byte(`{"error":"held","holder":{"operationId":"a","instance":"b","expiresAt":"2026-01-01T00:00:00Z"}}`), "")
	f.Add(423, []byte(`{"error":"unstable","retryAfterSeconds":2}`), "2")
	f.Add(409, []byte(`{"error":"revoked","reason":"topology_changed","topologyGeneration":9}`), "")
	f.Add(503, []byte(`<html>bad gateway</html>`), "x")
	f.Fuzz(func(t *testing.T, status int, body []byte, retryAfter string) {
		resp := &http.Response{StatusCode: status, Header: http.Header{"Retry-After": {retryAfter}}}
		e := decodeError(resp, body)
		_ = e.Error()
		_ = Transient(e)
		_ = terminalAnswer(KindFailoverHold, e)
		if e.RetryAfter < 0 || e.RetryAfter > maxRetryAfterSeconds*time.Second {
			t.Fatalf("Retry-After %v outside [0, %ds]", e.RetryAfter, maxRetryAfterSeconds)
		}
	})
}
