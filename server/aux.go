package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
)

// StatusInfo is what the auxiliary status page shows.
type StatusInfo struct {
	Version        string `json:"version"`
	Leader         bool   `json:"leader"`
	DeployAPI      bool   `json:"deployAPI"`
	DeployAPIAddr  string `json:"deployAPIAddr,omitempty"`
	LeaderElection bool   `json:"leaderElection"`
}

// NewAuxHandler returns the handler of the plain auxiliary port. info is
// called on every status request.
func NewAuxHandler(info func() StatusInfo) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/deploy" || strings.HasPrefix(r.URL.Path, "/deploy/"):
			// The deployment API is TLS-only; never answer it in clear.
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "not_found"})
		case r.URL.Path == "/" || r.URL.Path == "/status":
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				w.Header().Set("Allow", "GET, HEAD")
				writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method_not_allowed"})
				return
			}
			writeJSON(w, http.StatusOK, info())
		default:
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "not_found"})
		}
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// PlainHTTPServer runs the auxiliary plain-HTTP listener as a manager Runnable on
// every replica (not only the leader).
type PlainHTTPServer struct {
	Addr    string
	Handler http.Handler
	// ShutdownTimeout bounds graceful shutdown; default 10 s.
	ShutdownTimeout time.Duration
}

// NeedLeaderElection makes the aux server run on followers too.
func (s *PlainHTTPServer) NeedLeaderElection() bool { return false }

// Start listens until ctx ends, then shuts down gracefully.
func (s *PlainHTTPServer) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("auxiliary listener %s: %w", s.Addr, err)
	}
	srv := &http.Server{
		Handler:           s.Handler,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("auxiliary listener: %w", err)
	case <-ctx.Done():
	}
	timeout := s.ShutdownTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("auxiliary listener shutdown: %w", err)
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("auxiliary listener: %w", err)
	}
	return nil
}
