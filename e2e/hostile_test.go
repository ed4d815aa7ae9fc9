package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shipstream/bloodraven/e2e/e2etest"
	"github.com/shipstream/bloodraven/internal/devenv"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
)

// hostileRequest is one raw HTTP/1.1 request and the answer the contract
// (or, before the handler, net/http) gives it.
type hostileRequest struct {
	name   string
	raw    string // the request as sent; {token} is the deploy token
	status int
	code   string // the JSON error code; "" when the answer is not ours
}

func hostileRequests() []hostileRequest {
	g := "/deploy/v1/groups/" + devenv.GroupName
	req := func(method, path, headers, payload string) string {
		s := method + " " + path + " HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n" + headers
		if payload != "" || method == "POST" || method == "PUT" {
			s += "Content-Length: " + strconv.Itoa(len(payload)) + "\r\n"
		}
		return s + "Connection: close\r\n\r\n" + payload
	}
	grant := `{"kind":"migration","operationId":"hostile","instance":"` + devenv.DatabaseName + `"}`
	return []hostileRequest{
		{"malformed JSON", req("POST", g+"/leases", "Content-Type: application/json\r\n", `{"kind":`), 400, "bad_request"},
		{"not an object", req("POST", g+"/leases", "Content-Type: application/json\r\n", `[1,2,3]`), 400, "bad_request"},
		{"invalid UTF-8", req("POST", g+"/leases", "Content-Type: application/json\r\n", "{\"kind\":\"\xff\xfe\"}"), 400, "bad_request"},
		{"a field twice", req("POST", g+"/leases", "", `{"kind":"migration","kind":"failover-hold","operationId":"hostile","instance":"`+devenv.DatabaseName+`"}`), 400, "bad_request"},
		{"an unknown field", req("POST", g+"/leases", "", grant[:len(grant)-1]+`,"admin":true}`), 400, "bad_request"},
		{"oversized body (17 KiB)", req("POST", g+"/leases", "Content-Type: application/json\r\n", `{"kind":"`+strings.Repeat("m", 17<<10)+`"}`), 413, "too_large"},
		{"wrong method", req("PATCH", g+"/leases", "", grant), 405, "method_not_allowed"},
		{"wrong method on the group", req("DELETE", g, "", ""), 405, "method_not_allowed"},
		// The body is read as JSON whatever Content-Type says (docs/api.md).
		{"wrong content type, valid renewal of nothing", req("PUT", g+"/leases/migration/nobody", "Content-Type: text/plain\r\n", `{"token":"x"}`), 404, "not_found"},
		{"wrong content type, malformed body", req("POST", g+"/leases", "Content-Type: application/x-www-form-urlencoded\r\n", `kind=migration`), 400, "bad_request"},
		{"path traversal", req("GET", "/deploy/v1/groups/../../../healthz", "", ""), 404, "not_found"},
		{"path traversal into a group", req("GET", "/deploy/v1/x/../groups/"+devenv.GroupName, "", ""), 404, "not_found"},
		{"encoded traversal as a group name", req("GET", "/deploy/v1/groups/%2e%2e", "", ""), 400, "bad_request"},
		{"an operation id too long", req("PUT", g+"/leases/migration/"+strings.Repeat("a", 300), "", `{"token":"x"}`), 400, "bad_request"},
		{"no token", strings.Replace(req("GET", g, "", ""), "Authorization: Bearer {token}\r\n", "", 1), 401, "unauthenticated"},
		{"a token that is no JWT", strings.Replace(req("GET", g, "", ""), "{token}", strings.Repeat("x", 4000), 1), 401, "unauthenticated"},
		{"1 MiB header", req("GET", g, "X-Big: "+strings.Repeat("a", 1<<20)+"\r\n", ""), 431, ""},
		{"no request line", "GARBAGE\r\n\r\n", 400, ""},
	}
}

// Hostile input against the operator binary's TLS port: each request of
// the table gets the contract's JSON answer (or net/http's own, before any
// handler, for what is not HTTP), a slow body and 1,000 idle TLS
// connections are cut off by the server's timeouts while a normal request
// is still served, TLS 1.0 and 1.1 are refused, nothing panics, nothing
// changes, and the operator's goroutines and file descriptors come back to
// their count before the table.
func TestHostileInputOverTheWire(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	p, cfg := upPlayground(t)
	c := deployClient(t, p)
	admin, err := client.New(p.AdminConfig, client.Options{Scheme: bloodravenscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(p.Paths.CACert)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	tlsCfg := &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"http/1.1"}}
	dial := func() (*tls.Conn, error) { return tls.Dial("tcp", cfg.TLSAddr, tlsCfg) }
	metrics := "http://" + cfg.MetricsAddr + "/metrics"
	api := groupAPI(cfg.TLSAddr)

	leases := func() map[string]string {
		var list coordinationv1.LeaseList
		if err := admin.List(context.Background(), &list, client.InNamespace(devenv.PlaygroundNamespace)); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, l := range list.Items {
			out[l.Name] = l.ResourceVersion
		}
		return out
	}
	_, before := c.call(http.MethodGet, api, nil)
	leasesBefore := leases()
	// The baseline, once the operator's start-up has settled: the same
	// goroutine count twice, 500 ms apart.
	var goroutines, fds float64
	_ = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		last := goroutines
		goroutines, fds = e2etest.MetricValue(t, metrics, "go_goroutines"), e2etest.MetricValue(t, metrics, "process_open_fds")
		return goroutines == last, nil
	})

	t.Run("table", func(t *testing.T) {
		table := hostileRequests()
		defer func() {
			t.Logf("%d hostile requests, each answered as the contract (or net/http, for what is not HTTP) says", len(table))
		}()
		for _, tc := range table {
			conn, err := dial()
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.WriteString(conn, strings.ReplaceAll(tc.raw, "{token}", c.token))
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				conn.Close()
				t.Fatalf("%s: no answer: %v", tc.name, err)
			}
			raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			conn.Close()
			if resp.StatusCode != tc.status {
				t.Errorf("%s: %d %s, want %d", tc.name, resp.StatusCode, raw, tc.status)
				continue
			}
			if tc.code == "" {
				continue
			}
			var body map[string]any
			if resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(raw, &body) != nil || body["error"] != tc.code {
				t.Errorf("%s: %d %q %s, want {\"error\":%q}", tc.name, resp.StatusCode, resp.Header.Get("Content-Type"), raw, tc.code)
			}
		}
	})

	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		t.Run(tls.VersionName(v)+" refused", func(t *testing.T) {
			conn, err := tls.Dial("tcp", cfg.TLSAddr, &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: v, MaxVersion: v}) //nolint:gosec // the point
			if err == nil {
				conn.Close()
				t.Fatalf("%s handshake accepted", tls.VersionName(v))
			}
		})
	}

	t.Run("slow body and 1,000 idle TLS connections are cut off; service goes on", func(t *testing.T) {
		// The slow body: a POST that promises 100 bytes and sends one. The
		// binary's read timeout is 30 s.
		slow, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		defer slow.Close()
		fmt.Fprintf(slow, "POST /deploy/v1/groups/%s/leases HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer %s\r\nContent-Length: 100\r\n\r\n{", devenv.GroupName, c.token)
		slowStart := time.Now()
		slowDone := make(chan time.Duration, 1)
		go func() {
			_ = slow.SetReadDeadline(time.Now().Add(60 * time.Second))
			_, _ = io.ReadAll(slow) // an answer then EOF, or the close
			slowDone <- time.Since(slowStart)
		}()

		const idle = 1000
		conns := make([]*tls.Conn, 0, idle)
		opened := time.Now()
		for len(conns) < idle {
			conn, err := dial()
			if err != nil {
				for _, c := range conns {
					c.Close()
				}
				t.Fatalf("idle connection %d: %v", len(conns)+1, err)
			}
			conns = append(conns, conn)
		}
		handshakes := time.Since(opened)
		peak := e2etest.MetricValue(t, metrics, "process_open_fds")
		// Service goes on beside them.
		if st, body := c.call(http.MethodGet, api, nil); st != http.StatusOK {
			t.Fatalf("GET beside %d idle connections: %d %v", idle, st, body)
		}
		// The server closes every idle connection (it waits at most its
		// header timeout, 10 s, for a request).
		var wg sync.WaitGroup
		var mu sync.Mutex
		var slowest time.Duration
		notClosed := 0
		for _, conn := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				_ = conn.SetReadDeadline(time.Now().Add(40 * time.Second))
				_, err := conn.Read(make([]byte, 1))
				mu.Lock()
				defer mu.Unlock()
				if err == nil || strings.Contains(err.Error(), "timeout") {
					notClosed++
				}
				slowest = max(slowest, time.Since(opened))
			}()
		}
		wg.Wait()
		if notClosed > 0 {
			t.Fatalf("%d of %d idle connections were not closed by the server within 40 s", notClosed, idle)
		}
		took := <-slowDone
		if took < 25*time.Second || took > 45*time.Second {
			t.Fatalf("the slow body held its connection %v; the read timeout is 30 s", took)
		}
		t.Logf("%d idle TLS connections: opened in %v (operator fds %v → %v), all closed by the server %v after the first opened; the slow body cut off after %v",
			idle, handshakes.Round(time.Millisecond), fds, peak, slowest.Round(time.Millisecond), took.Round(time.Millisecond))
	})

	// Nothing panicked, nothing changed, nothing leaked.
	if log, err := os.ReadFile(p.Paths.OperatorLog); err != nil || strings.Contains(strings.ToLower(string(log)), "panic") {
		t.Fatalf("the operator log mentions a panic (or is unreadable: %v)", err)
	}
	if p.Restarts() != 0 {
		t.Fatalf("the operator was restarted %d times during the table", p.Restarts())
	}
	_, after := c.call(http.MethodGet, api, nil)
	if fmt.Sprint(before["leases"]) != fmt.Sprint(after["leases"]) || fmt.Sprint(leasesBefore) != fmt.Sprint(leases()) {
		t.Fatalf("state changed: leases %v → %v; Lease objects %v → %v", before["leases"], after["leases"], leasesBefore, leases())
	}
	var g2, f2 float64
	err = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		g2, f2 = e2etest.MetricValue(t, metrics, "go_goroutines"), e2etest.MetricValue(t, metrics, "process_open_fds")
		return g2 <= goroutines+5 && f2 <= fds+5, nil
	})
	if err != nil {
		t.Fatalf("goroutines %v → %v, open fds %v → %v: not back to their count before the table", goroutines, g2, fds, f2)
	}
	t.Logf("operator goroutines %v before the table, %v after; open fds %v before, %v after", goroutines, g2, fds, f2)
}
