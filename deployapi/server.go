package deployapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/julienschmidt/httprouter"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shipstream/bloodraven/leasestore"
)

// PathPrefix is where the API is mounted.
const PathPrefix = "/deploy/v1/"

// Config wires the API to the cluster.
type Config struct {
	// Audience required of caller tokens; default bloodraven-deploy.
	Audience string
	// IsLeader reports whether this replica is the elected leader.
	IsLeader func() bool
	// Clock is the one clock every time read goes through.
	Clock clock.PassiveClock
	// Kube performs TokenReviews.
	Kube kubernetes.Interface
	// API reads MysqlDatabases and groups uncached.
	API client.Reader
	// Leases stores deployment leases.
	Leases *leasestore.Store
	// Log receives one line per request.
	Log logr.Logger
	// Metrics registers the API's metrics; nil skips registration.
	Metrics prometheus.Registerer
	// Groups lists MysqlFailoverGroups (a cached reader is fine) so the
	// active-lease gauge reports 0 for groups without leases; optional.
	Groups client.Reader
	// AuthCacheTTL and AuthCacheSize default to 15 s and 1,024.
	AuthCacheTTL  time.Duration
	AuthCacheSize int
}

// Server is the deployment API.
type Server struct {
	cfg     Config
	api     client.Reader
	leases  *leasestore.Store
	clock   clock.PassiveClock
	authn   *authenticator
	log     logr.Logger
	metrics *metrics
	router  *httprouter.Router
}

// New builds the API. Its Handler answers under PathPrefix.
func New(cfg Config) (*Server, error) {
	if cfg.Audience == "" {
		cfg.Audience = "bloodraven-deploy"
	}
	if cfg.AuthCacheTTL == 0 {
		cfg.AuthCacheTTL = DefaultAuthCacheTTL
	}
	if cfg.AuthCacheSize == 0 {
		cfg.AuthCacheSize = DefaultAuthCacheSize
	}
	if cfg.IsLeader == nil || cfg.Clock == nil || cfg.Kube == nil || cfg.API == nil || cfg.Leases == nil {
		return nil, errors.New("deployapi: IsLeader, Clock, Kube, API and Leases are required")
	}
	s := &Server{
		cfg:    cfg,
		api:    cfg.API,
		leases: cfg.Leases,
		clock:  cfg.Clock,
		authn:  newAuthenticator(cfg.Kube, cfg.Audience, cfg.Clock, cfg.AuthCacheTTL, cfg.AuthCacheSize),
		log:    cfg.Log,
	}
	m, err := newMetrics(cfg.Metrics, cfg.Leases, cfg.Groups, cfg.Clock)
	if err != nil {
		return nil, err
	}
	s.metrics = m

	r := httprouter.New()
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.HandleMethodNotAllowed = true
	r.HandleOPTIONS = false
	r.GET("/deploy/v1/groups/:group", s.wrap("get_group", s.getGroup))
	r.POST("/deploy/v1/groups/:group/leases", s.wrap("grant", s.grant))
	r.PUT("/deploy/v1/groups/:group/leases/:kind/:operationId", s.wrap("renew", s.renew))
	r.DELETE("/deploy/v1/groups/:group/leases/:kind/:operationId", s.wrap("release", s.release))
	notAllowed := s.wrap("method_not_allowed", func(*request) (int, any, error) { return 0, nil, errMethodNotAllowed })
	notFound := s.wrap("not_found", func(*request) (int, any, error) { return 0, nil, errNotFound })
	r.MethodNotAllowed = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { notAllowed(w, req, nil) })
	r.NotFound = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { notFound(w, req, nil) })
	r.PanicHandler = func(w http.ResponseWriter, req *http.Request, v any) {
		// wrap recovers first; this is a last resort that keeps the contract.
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": codeInternal})
	}
	s.router = r
	return s, nil
}

// Handler serves the API.
func (s *Server) Handler() http.Handler { return s.router }

// request is what a handler sees: the authenticated caller, the path
// parameters, and the log fields it fills in as it learns them.
type request struct {
	ctx      context.Context
	http     *http.Request
	params   httprouter.Params
	identity Identity
	// log and metric fields
	group, namespace, instance, operationID string
	authorized                              bool
}

type handlerFunc func(r *request) (status int, body any, err error)

// wrap runs the checks every route shares — leadership, then
// authentication — calls h, writes the answer, and records one log line and
// the request metrics.
func (s *Server) wrap(name string, h handlerFunc) httprouter.Handle {
	return func(w http.ResponseWriter, hr *http.Request, ps httprouter.Params) {
		start := s.clock.Now()
		req := &request{ctx: hr.Context(), http: hr, params: ps}
		status, body, err := s.serve(req, h)
		var ae *apiError
		if err != nil {
			ae = errFromKube(err)
			status = ae.status
			ae.headers(w.Header())
			writeJSON(w, status, ae.body())
		} else if status == http.StatusNoContent {
			w.WriteHeader(status)
		} else {
			writeJSON(w, status, body)
		}
		s.record(name, req, status, s.clock.Since(start), ae)
	}
}

func (s *Server) serve(req *request, h handlerFunc) (status int, body any, err error) {
	defer func() {
		if v := recover(); v != nil {
			status, body, err = 0, nil, &apiError{status: http.StatusInternalServerError, code: codeInternal, cause: fmt.Errorf("panic: %v", v)}
		}
	}()
	if !s.cfg.IsLeader() {
		return 0, nil, errNotLeader
	}
	id, err := s.authn.authenticate(req.ctx, req.http)
	if err != nil {
		return 0, nil, err
	}
	req.identity = id
	return h(req)
}

// record writes the request's log line and metrics. The group label is
// empty unless the caller was authorized for the group, so arbitrary paths
// cannot create metric series.
func (s *Server) record(handler string, req *request, status int, d time.Duration, ae *apiError) {
	group := ""
	if req.authorized {
		group = req.group
	}
	s.metrics.observe(handler, strconv.Itoa(status), group, d)
	kv := []any{
		"handler", handler, "group", req.group, "instance", req.instance, "namespace", req.namespace,
		"operationId", req.operationID, "status", status, "duration_ms", float64(d.Microseconds()) / 1000,
	}
	if req.identity.Namespace != "" {
		kv = append(kv, "identity", req.identity.Username())
	}
	if ae != nil && ae.cause != nil {
		kv = append(kv, "error", ae.cause.Error())
	}
	s.log.Info("deploy api", kv...)
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
