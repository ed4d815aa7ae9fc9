package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// TLSServer is the operator's TLS listener: the admission webhooks on a
// ServeMux, and every path under /deploy/ on the deployment API's own
// handler. It implements controller-runtime's webhook.Server.
//
// Why not the webhook server's ServeMux alone: a ServeMux answers a path
// with "//", "." or ".." segments, and /deploy/v1 without its slash, with a
// redirect and an HTML body before any handler runs. The contract wants
// JSON for every path under /deploy/, so those paths never reach the mux.
type TLSServer struct {
	// ReadTimeout bounds reading a whole request, body included (default
	// 30 s): a client that sends its body slowly (slowloris) loses the
	// connection instead of holding it. Headers have 10 s.
	ReadTimeout time.Duration

	opts webhook.Options
	mux  *http.ServeMux
	// hooks registers admission webhooks into mux, instrumented with
	// controller-runtime's webhook metrics; it is never started.
	hooks   webhook.Server
	deploy  http.Handler
	started atomic.Bool
}

var _ webhook.Server = (*TLSServer)(nil)

// NewTLSServer builds the listener from webhook options (see
// TLSListenerOptions). Host, Port, CertDir, CertName, KeyName and TLSOpts
// are used.
func NewTLSServer(opts webhook.Options) *TLSServer {
	opts.WebhookMux = http.NewServeMux()
	return &TLSServer{opts: opts, mux: opts.WebhookMux, hooks: webhook.NewServer(opts)}
}

// HandleDeploy serves every path under /deploy/ with h, as sent. Call it
// before Start. Without it, those paths answer 404 {"error":"not_found"}.
func (s *TLSServer) HandleDeploy(h http.Handler) { s.deploy = h }

// NeedLeaderElection: every replica serves (followers answer 503).
func (s *TLSServer) NeedLeaderElection() bool { return false }

// Register serves an admission webhook at path, with the request metrics
// controller-runtime's webhook server records
// (controller_runtime_webhook_requests_total and friends).
func (s *TLSServer) Register(path string, hook http.Handler) { s.hooks.Register(path, hook) }

// WebhookMux is the admission webhooks' mux.
func (s *TLSServer) WebhookMux() *http.ServeMux { return s.mux }

// isDeployPath reports whether a request path belongs to the deployment
// API, as sent or once cleaned.
func isDeployPath(p string) bool {
	under := func(p string) bool { return p == "/deploy" || strings.HasPrefix(p, "/deploy/") }
	return under(p) || under(path.Clean("/"+p))
}

// ServeHTTP dispatches: /deploy/ to the deployment API, the rest to the mux.
func (s *TLSServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !isDeployPath(r.URL.Path) {
		s.mux.ServeHTTP(w, r)
		return
	}
	if s.deploy == nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "not_found"})
		return
	}
	s.deploy.ServeHTTP(w, r)
}

func (s *TLSServer) addr() string {
	return net.JoinHostPort(s.opts.Host, strconv.Itoa(s.opts.Port))
}

// Start serves until ctx ends, reloading the certificate when its files
// change.
func (s *TLSServer) Start(ctx context.Context) error {
	cfg := &tls.Config{NextProtos: []string{"h2"}}
	for _, op := range s.opts.TLSOpts {
		op(cfg)
	}
	if cfg.GetCertificate == nil {
		w, err := certwatcher.New(filepath.Join(s.opts.CertDir, s.opts.CertName), filepath.Join(s.opts.CertDir, s.opts.KeyName))
		if err != nil {
			return fmt.Errorf("TLS certificate: %w", err)
		}
		cfg.GetCertificate = w.GetCertificate
		go func() { _ = w.Start(ctx) }()
	}
	ln, err := tls.Listen("tcp", s.addr(), cfg)
	if err != nil {
		return fmt.Errorf("TLS listener: %w", err)
	}
	readTimeout := s.ReadTimeout
	if readTimeout == 0 {
		readTimeout = 30 * time.Second
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: min(10*time.Second, readTimeout), ReadTimeout: readTimeout,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	s.started.Store(true)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("TLS listener: %w", err)
	}
	<-done
	return nil
}

// StartedChecker is healthy once the listener accepts TLS connections.
func (s *TLSServer) StartedChecker() healthz.Checker {
	return func(*http.Request) error {
		if !s.started.Load() {
			return errors.New("the TLS listener has not started yet")
		}
		d := &net.Dialer{Timeout: 10 * time.Second}
		conn, err := tls.DialWithDialer(d, "tcp", s.addr(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a liveness dial, no data
		if err != nil {
			return fmt.Errorf("the TLS listener is not reachable: %w", err)
		}
		return conn.Close()
	}
}
