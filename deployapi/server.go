package deployapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/julienschmidt/httprouter"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/deployapi/authn"
	"github.com/shipstream/bloodraven/deployclient/wire"
	"github.com/shipstream/bloodraven/store/leasestore"
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
	// API reads MysqlDatabases and groups uncached: these reads decide
	// authorization and carry the fence.
	API client.Reader
	// Databases proposes the MysqlDatabases that may authorize a caller: a
	// cache with the index of IndexDatabases. It never decides. Nil uses
	// API (an uncached LIST per request: tests and tools only).
	Databases client.Reader
	// Leases stores deployment leases.
	Leases *leasestore.Store
	// Log receives one line per request.
	Log logr.Logger
	// Metrics registers the API's metrics; nil skips registration.
	Metrics prometheus.Registerer
	// Groups lists MysqlFailoverGroups (a cached reader is fine) so the
	// active-lease gauge reports 0 for groups without leases; optional.
	Groups client.Reader
	// Informers report changes to groups and deployment Leases (the cache
	// that Groups and Leases.Cached read): they wake held lease GETs.
	// Without them `Prefer: wait` is ignored and a lease GET answered at
	// once.
	Informers cache.Informers
	// AuthCacheTTL and AuthCacheSize default to 15 s and 1,024.
	AuthCacheTTL  time.Duration
	AuthCacheSize int
	// FairShare are the per-identity limits (fairshare.go); zero fields
	// take their defaults.
	FairShare FairShare
}

// Server is the deployment API.
type Server struct {
	cfg     Config
	api     client.Reader
	dbs     client.Reader
	leases  *leasestore.Store
	clock   clock.PassiveClock
	authn   *authn.Authenticator
	fair    *fairShare
	log     logr.Logger
	metrics *metrics
	router  *httprouter.Router
	// holding counts the lease GETs held right now.
	holding atomic.Int64
	// changes wakes held GETs (nil without Config.Informers).
	changes *changes
	// draining is closed by Drain: held GETs answer at once.
	draining  chan struct{}
	drainOnce sync.Once
}

// Drain answers every held lease GET at once with the lease as it stands,
// and every later one without holding it: the process is stopping. Call it
// when the operator begins to stop (SIGTERM), before the listener drains:
// a held GET would otherwise keep the listener, and with it the leader
// Lease, for up to its whole wait, while the Service already routes to no
// one. Safe to call more than once.
func (s *Server) Drain() { s.drainOnce.Do(func() { close(s.draining) }) }

// New builds the API. Its Handler answers under PathPrefix.
func New(cfg Config) (*Server, error) {
	if cfg.Audience == "" {
		cfg.Audience = "bloodraven-deploy"
	}
	if cfg.AuthCacheTTL == 0 {
		cfg.AuthCacheTTL = authn.DefaultCacheTTL
	}
	if cfg.AuthCacheSize == 0 {
		cfg.AuthCacheSize = authn.DefaultCacheSize
	}
	if cfg.IsLeader == nil || cfg.Clock == nil || cfg.Kube == nil || cfg.API == nil || cfg.Leases == nil {
		return nil, errors.New("deployapi: IsLeader, Clock, Kube, API and Leases are required")
	}
	if cfg.Databases == nil {
		cfg.Databases = cfg.API
	}
	s := &Server{
		draining: make(chan struct{}),
		cfg:      cfg,
		api:      cfg.API,
		dbs:      cfg.Databases,
		leases:   cfg.Leases,
		clock:    cfg.Clock,
		authn:    authn.New(cfg.Kube.AuthenticationV1().TokenReviews(), cfg.Audience, cfg.Clock, cfg.AuthCacheTTL, cfg.AuthCacheSize),
		fair:     newFairShare(cfg.FairShare),
		log:      cfg.Log,
	}
	if cfg.Informers != nil {
		s.changes = newChanges()
		if err := s.changes.register(cfg.Informers); err != nil {
			return nil, err
		}
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
	for _, rt := range s.routes() {
		r.Handle(rt.method, rt.path, s.wrap(rt.route))
	}
	notAllowed := s.wrap(route{name: "method_not_allowed", parse: refuse(errMethodNotAllowed)})
	notFound := s.wrap(route{name: "not_found", parse: refuse(errNotFound)})
	r.MethodNotAllowed = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { notAllowed(w, req, nil) })
	r.NotFound = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { notFound(w, req, nil) })
	r.PanicHandler = func(w http.ResponseWriter, req *http.Request, v any) {
		// wrap recovers first; this is a last resort that keeps the contract.
		writeJSON(w, http.StatusInternalServerError, wire.Error{Error: codeInternal})
	}
	s.router = r
	return s, nil
}

// routedPath is a route's method and path (httprouter's :name for a path
// parameter) and what serves it.
type routedPath struct {
	method, path string
	route        route
}

// routes are the API's routes; docs/openapi.yaml is tested against them.
func (s *Server) routes() []routedPath {
	const group, lease = "/deploy/v1/groups/:group", "/deploy/v1/groups/:group/leases/:kind/:operationId"
	return []routedPath{
		{http.MethodGet, group, route{"get_group", parseGetGroup, s.getGroup}},
		{http.MethodPost, group + "/leases", route{"grant", parseGrant, s.grant}},
		{http.MethodGet, lease, route{"get_lease", parseWatch, s.watch}},
		{http.MethodPut, lease, route{"renew", parseRenew, s.renew}},
		{http.MethodDelete, lease, route{"release", parseRelease, s.release}},
	}
}

// refuse is the parser of a path that names no route: after leadership and
// authentication, it answers e.
func refuse(e *apiError) parser {
	return func(*http.Request, httprouter.Params, *call) *apiError { return e }
}

// Handler serves the API. Give it every path under /deploy/ as sent: it
// answers JSON for all of them (404 not_found when no route matches),
// never a redirect.
func (s *Server) Handler() http.Handler { return s.router }

// statusClientClosedRequest is recorded (never sent) for a request whose
// caller went away before it was answered.
const statusClientClosedRequest = 499

// wrap turns a route into a handler: one straight line of checks in the
// contract's order (leadership, authentication, the identity's fair share,
// the path and body, then authorization), then the route's action. It writes the answer and derives
// the request's one log line and its metrics from the call and the result.
func (s *Server) wrap(rt route) httprouter.Handle {
	return func(w http.ResponseWriter, hr *http.Request, ps httprouter.Params) {
		start := s.clock.Now()
		c := call{route: rt.name}
		g, res := s.serve(hr, ps, rt, &c)
		var ae *apiError
		if res.err != nil {
			ae = errFromAPIServer(res.err)
			res.status = ae.status
			ae.headers(w.Header())
			writeJSON(w, ae.status, ae.body())
			if errors.Is(hr.Context().Err(), context.Canceled) {
				// The caller closed the request (a client that stopped
				// renewing, a timeout): it reads no answer, and it is no
				// failure of ours. Recorded as 499, as proxies do, so
				// that 5xx counts only the server's own failures.
				res.status = statusClientClosedRequest
			}
		} else if res.status == http.StatusNoContent {
			w.WriteHeader(res.status)
		} else {
			writeJSON(w, res.status, res.body)
		}
		s.record(&c, g, res, s.clock.Since(start), ae)
	}
}

// serve runs the checks and the action. g is the group once authorized.
func (s *Server) serve(hr *http.Request, ps httprouter.Params, rt route, c *call) (g *bloodravenv1alpha1.MysqlFailoverGroup, res result) {
	defer func() {
		if v := recover(); v != nil {
			res = fail(&apiError{status: http.StatusInternalServerError, code: codeInternal, cause: fmt.Errorf("panic: %v", v)})
		}
	}()
	if !s.cfg.IsLeader() {
		return nil, fail(errNotLeader)
	}
	id, err := s.authn.Authenticate(hr.Context(), hr)
	if err != nil {
		return nil, fail(errFromAuthn(err))
	}
	c.identity = id
	// The identity's share, before the body is read and before any read of
	// the API server: a 429 costs nothing and changes nothing.
	tk, e, limit := s.fair.admit(id, s.clock.Now())
	if e != nil {
		s.metrics.rateLimited.WithLabelValues(c.route, limit).Inc()
		return nil, fail(e)
	}
	defer tk.done()
	c.ticket = tk
	e = rt.parse(hr, ps, c)
	if e == nil {
		e = parseNamespaceQuery(hr, c)
	}
	if e != nil {
		*c = call{route: c.route, identity: id, ticket: tk} // log nothing of a request that did not parse
		return nil, fail(e)
	}
	g, err = s.authorize(hr.Context(), id, c)
	if err != nil {
		return nil, fail(err)
	}
	return g, rt.act(hr, c, g)
}

// record writes the request's log line and metrics. The group and
// namespace labels are empty unless the caller was authorized for the group,
// so neither an arbitrary path nor an arbitrary ?namespace= can create
// metric series.
func (s *Server) record(c *call, g *bloodravenv1alpha1.MysqlFailoverGroup, res result, d time.Duration, ae *apiError) {
	group, namespace := "", ""
	if g != nil {
		group, namespace = g.Name, g.Namespace
	}
	s.metrics.observe(c.route, strconv.Itoa(res.status), namespace, group, d)
	instance := c.instance
	if res.instance != "" {
		instance = res.instance
	}
	kv := []any{
		"handler", c.route, "group", c.group, "instance", instance, "namespace", namespace,
		"operationId", c.operationID, "status", res.status, "duration_ms", float64(d.Microseconds()) / 1000,
	}
	if c.identity.Namespace != "" {
		kv = append(kv, "identity", c.identity.Username())
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
