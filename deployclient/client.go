package deployclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/shipstream/bloodraven/deployclient/wire"
)

// Lease kinds of the deployment API.
const (
	KindMigration    = wire.KindMigration
	KindFailoverHold = wire.KindFailoverHold
)

// Error codes of the deployment API that the client acts on (docs/api.md);
// package wire defines them.
const (
	CodeBadRequest       = wire.CodeBadRequest
	CodeUnauthenticated  = wire.CodeUnauthenticated
	CodeForbidden        = wire.CodeForbidden
	CodeMigrationNotHeld = wire.CodeMigrationNotHeld
	CodeTokenMismatch    = wire.CodeTokenMismatch
	CodeNotFound         = wire.CodeNotFound
	CodeHeld             = wire.CodeHeld
	CodeRevoked          = wire.CodeRevoked
	CodeUnstable         = wire.CodeUnstable
	CodeNotLeader        = wire.CodeNotLeader
	CodeUnavailable      = wire.CodeUnavailable
	// CodeVerificationRequired: a migration grant for an instance whose last
	// run lost authority past its DDL boundary (docs/gate.md).
	CodeVerificationRequired = wire.CodeVerificationRequired
	// CodeDeferralBudgetExhausted: a failover-hold grant while a planned
	// operation's deferral budget is spent and it has not run (docs/failover.md):
	// not acquired now (exit 3); retry after the operation ran.
	CodeDeferralBudgetExhausted = wire.CodeDeferralBudgetExhausted
	CodeMethodNotAllowed        = wire.CodeMethodNotAllowed
)

// Phase is how far a migration's command got, as a renewal reports it
// (docs/api.md PUT row): pre-ddl, ddl or done. Phases only move forward.
type Phase = wire.Phase

// Phases of a migration, in order. The empty Phase sends none.
const (
	PhasePreDDL = wire.PhasePreDDL
	PhaseDDL    = wire.PhaseDDL
	PhaseDone   = wire.PhaseDone
)

// Config says where the deployment API is and how to trust and authenticate
// to it.
type Config struct {
	// Server is the API's base URL, https://host[:port]. Plain http is refused.
	Server string
	// CAFile is a PEM bundle the server's certificate must chain to. Empty
	// means the system roots. The hostname of Server is always verified.
	CAFile string
	// TokenFile holds the projected ServiceAccount token (audience
	// bloodraven-deploy). It is read again for every request, so a rotated
	// token is picked up without a restart.
	TokenFile string
	// RequestTimeout caps one request; default 10 s. A session also cuts a
	// renewal off at the lease's confirmed deadline.
	RequestTimeout time.Duration
	// UserAgent is sent with every request.
	UserAgent string
	// Namespace is the group's namespace (a DNS label). When set, every
	// request carries ?namespace=<ns>, so the server considers only that
	// namespace (it settles an ambiguity across namespaces, docs/api.md), and
	// an answer that names another namespace is a *NamespaceError. Empty:
	// requests name none; a Session then learns and pins the namespace from
	// its first answer that names one.
	Namespace string
}

// Client speaks the deployment API. It holds no lease state; see Session.
type Client struct {
	base      *url.URL
	hc        *http.Client
	tokenFile string
	timeout   time.Duration
	userAgent string
	// namespace is sent with every request, and answers are held to it.
	namespace string
}

// New checks cfg and loads the CA bundle.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.Server)
	if err != nil {
		return nil, fmt.Errorf("server URL %q: %w", cfg.Server, err)
	}
	if u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("server URL %q: want https://host[:port] (the deployment API is served only over TLS)", cfg.Server)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		return nil, fmt.Errorf("server URL %q: want no path or query (the client adds /deploy/v1/...)", cfg.Server)
	}
	u.Path = ""
	if cfg.Namespace != "" && !isDNSLabel(cfg.Namespace) {
		return nil, fmt.Errorf("namespace %q: want a Kubernetes namespace name (a DNS label: at most 63 of [a-z0-9-], starting and ending with a letter or digit)", cfg.Namespace)
	}
	if cfg.TokenFile == "" {
		return nil, errors.New("no token file: the projected ServiceAccount token (audience bloodraven-deploy) is required")
	}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: u.Hostname()}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s: no PEM certificate in it", cfg.CAFile)
		}
		tlsCfg.RootCAs = roots
	}
	timeout := cfg.RequestTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ua := cfg.UserAgent
	if ua == "" {
		ua = "bloodraven-deployclient"
	}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSClientConfig:     tlsCfg,
		TLSHandshakeTimeout: timeout,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	}
	return &Client{
		base:      u,
		hc:        &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		tokenFile: cfg.TokenFile,
		timeout:   timeout,
		userAgent: ua,
		namespace: cfg.Namespace,
	}, nil
}

// Server is the base URL the client talks to.
func (c *Client) Server() string { return c.base.String() }

// Namespace is the namespace every request names; empty when none is set.
func (c *Client) Namespace() string { return c.namespace }

// inNamespace is a copy of c whose requests name ns; it shares c's
// connections.
func (c *Client) inNamespace(ns string) *Client {
	cp := *c
	cp.namespace = ns
	return &cp
}

// NamespaceError is an answer that names another namespace than the one
// the client pinned. The server considers only the namespace a request
// names, so such an answer is a protocol error, never a reason to follow
// it: the answer is not used, and a Session treats it as the loss of its
// authority (CauseNamespaceMismatch), or as a refusal no retry can change
// while it acquires.
type NamespaceError struct {
	// Pinned is the namespace the client sends; Answered the one the
	// answer named.
	Pinned, Answered string
	// Answer says which answer it was ("GET group", "POST lease", ...).
	Answer string
}

func (e *NamespaceError) Error() string {
	return fmt.Sprintf("the answer to %s named namespace %q, but this client is pinned to namespace %q: a protocol error (the answer was not used)", e.Answer, e.Answered, e.Pinned)
}

// checkNamespace holds an answer's namespace to the client's: an answer
// that names none (an older operator) is accepted.
func (c *Client) checkNamespace(answer, answered string) error {
	if c.namespace == "" || answered == "" || answered == c.namespace {
		return nil
	}
	return &NamespaceError{Pinned: c.namespace, Answered: answered, Answer: answer}
}

// isDNSLabel reports a valid namespace name (RFC 1123 label).
func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// Holder is the operation that holds a group's migration mutex.
type Holder = wire.Holder

// APIError is an answer of the deployment API other than success: the
// contract's JSON error, with its extra fields decoded.
type APIError struct {
	Status     int
	Code       string
	Message    string
	Holder     *Holder
	Reason     string
	Generation int64
	// OperationID names the gated operation of 409 verification_required.
	OperationID string
	// RetryAfter is from retryAfterSeconds or the Retry-After header.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("%d %s", e.Status, e.Code)
	switch {
	case e.Code == CodeRevoked:
		s += fmt.Sprintf(" (reason %s, group generation %d)", e.Reason, e.Generation)
	case e.Code == CodeVerificationRequired:
		s += fmt.Sprintf(" (operation %s lost authority past its DDL boundary at generation %d; a person must verify the schema)", e.OperationID, e.Generation)
	case e.Holder != nil:
		s += fmt.Sprintf(" (by operation %s, instance %s, until %s)", e.Holder.OperationID, e.Holder.Instance, e.Holder.ExpiresAt)
	case e.Message != "":
		s += ": " + e.Message
	}
	return s
}

// Is lets errors.Is match an *APIError by status and code.
func (e *APIError) Is(target error) bool {
	t, ok := target.(*APIError)
	return ok && t.Status == e.Status && t.Code == e.Code
}

// Transient reports whether err may go away by itself: a transport failure,
// 423 unstable, 503 (not_leader, unavailable), 429, other 5xx, and 401 (a
// token file in the middle of rotation). Everything else is an answer.
func Transient(err error) bool {
	var ae *APIError
	var ne *NamespaceError
	if errors.As(err, &ne) {
		return false // a protocol error: asking again does not change it
	}
	if !errors.As(err, &ae) {
		return err != nil && !errors.Is(err, context.Canceled) && !untrusted(err)
	}
	switch {
	case ae.Status == http.StatusLocked, ae.Status == http.StatusTooManyRequests,
		ae.Status == http.StatusUnauthorized, ae.Status >= 500:
		return true
	}
	return false
}

// untrusted reports a server certificate that failed verification: that does
// not go away by asking again.
func untrusted(err error) bool {
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	return errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci)
}

// Lease is a grant's or renewal's answer. Its Phase is empty from an
// operator that does not record phases.
type Lease = wire.Lease

// Grant is a grant's answer: the lease and its token. Created is false for a
// re-grant of the same operation (200), which invalidated the previous token.
type Grant struct {
	wire.Grant
	Created bool `json:"-"`
}

// GrantRequest asks for a lease.
type GrantRequest = wire.GrantRequest

// Group is the observation GET /deploy/v1/groups/{group} answers.
type Group = wire.Group

// Health is the group's health block.
type Health = wire.Health

// Operations are the group's operation phases.
type Operations = wire.Operations

// Planned is a planned failover's phase and reason.
type Planned = wire.Planned

// Listed is a live lease as GET lists it.
type Listed = wire.ListedLease

// Admission is a running deferral budget, as GET shows it.
type Admission = wire.Admission

// Observe reads the group. The observation grants nothing.
func (c *Client) Observe(ctx context.Context, group string) (*Group, error) {
	var g Group
	if _, err := c.do(ctx, c.timeout, http.MethodGet, groupPath(group), nil, nil, &g); err != nil {
		return nil, err
	}
	if err := c.checkNamespace("GET group "+group, g.Namespace); err != nil {
		return nil, err
	}
	return &g, nil
}

// Grant asks for a lease. A second Grant for the same operation re-grants it:
// a new token, and the previous one stops working.
func (c *Client) Grant(ctx context.Context, group string, req GrantRequest) (*Grant, error) {
	var g Grant
	status, err := c.do(ctx, c.timeout, http.MethodPost, groupPath(group)+"/leases", req, nil, &g)
	if err != nil {
		return nil, err
	}
	if err := c.checkNamespace("POST "+req.Kind+" lease", g.Namespace); err != nil {
		return nil, err
	}
	g.Created = status == http.StatusCreated
	return &g, nil
}

// Renew renews a lease; ttlSeconds 0 keeps the lease's ttl. phase, on the
// migration lease, reports how far the command got; empty sends none.
func (c *Client) Renew(ctx context.Context, group, kind, operationID, token string, ttlSeconds int64, phase Phase) (*Lease, error) {
	body := wire.RenewRequest{Token: token, TTLSeconds: ttlSeconds, Phase: phase}
	var l Lease
	if _, err := c.do(ctx, c.timeout, http.MethodPut, leasePath(group, kind, operationID), body, nil, &l); err != nil {
		return nil, err
	}
	if err := c.checkNamespace("PUT "+kind+" lease", l.Namespace); err != nil {
		return nil, err
	}
	return &l, nil
}

// MaxWatchWait is the longest wait the lease GET takes (Prefer: wait=N).
const MaxWatchWait = 60 * time.Second

// Watch reads a lease without renewing it. With wait > 0 the server holds
// the answer until the lease stops being the caller's (the error its state
// calls for: 404, 403 token_mismatch, 409 revoked) or wait passes (the
// lease as it stands). It never renews.
func (c *Client) Watch(ctx context.Context, group, kind, operationID, token string, wait time.Duration) (*Lease, error) {
	wait = min(max(wait, 0), MaxWatchWait)
	hdr := http.Header{"X-Lease-Token": {token}}
	if secs := int64(wait / time.Second); secs > 0 {
		hdr.Set("Prefer", "wait="+strconv.FormatInt(secs, 10))
	}
	var l Lease
	if _, err := c.do(ctx, wait+c.timeout, http.MethodGet, leasePath(group, kind, operationID), nil, hdr, &l); err != nil {
		return nil, err
	}
	if err := c.checkNamespace("GET "+kind+" lease", l.Namespace); err != nil {
		return nil, err
	}
	return &l, nil
}

// Release releases a lease. An absent, expired or revoked lease is released
// already (204).
func (c *Client) Release(ctx context.Context, group, kind, operationID, token string) error {
	return c.ReleaseReporting(ctx, group, kind, operationID, token, "")
}

// Outcomes a release of the migration lease may report (X-Deploy-Outcome,
// docs/gate.md); the operator records the report in the operation's DeployRun.
const (
	OutcomeSucceeded     = "succeeded"
	OutcomeFailed        = "failed"
	OutcomeLostBeforeDDL = "lost-before-ddl"
	OutcomeLostAfterDDL  = "lost-after-ddl"
	OutcomeAbortFailed   = "abort-failed"
)

// ReleaseReporting releases a lease like Release and, for the migration
// lease, reports outcome (empty: none) in the X-Deploy-Outcome header. An
// operator older than the header ignores it.
func (c *Client) ReleaseReporting(ctx context.Context, group, kind, operationID, token, outcome string) error {
	h := http.Header{"X-Lease-Token": {token}}
	if outcome != "" {
		h.Set("X-Deploy-Outcome", outcome)
	}
	_, err := c.do(ctx, c.timeout, http.MethodDelete, leasePath(group, kind, operationID), nil, h, nil)
	return err
}

func groupPath(group string) string { return "/deploy/v1/groups/" + url.PathEscape(group) }

func leasePath(group, kind, op string) string {
	return groupPath(group) + "/leases/" + url.PathEscape(kind) + "/" + url.PathEscape(op)
}

// ReadToken reads the bearer token from path, as every request does.
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if looksLikeAToken(path) {
			// A token given where its file belongs: never echo it.
			return "", errors.New("token file: the value given is not a readable file (it looks like a token itself, not shown); give the token's path")
		}
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}

// looksLikeAToken: long and without a slash, like a JWT or a lease token
// rather than a file name.
func looksLikeAToken(path string) bool {
	return len(path) > 40 && !strings.ContainsRune(path, '/')
}

// maxResponse bounds what the client reads of an answer.
const maxResponse = 1 << 20

func (c *Client) do(ctx context.Context, timeout time.Duration, method, path string, in any, hdr http.Header, out any) (int, error) {
	token, err := ReadToken(c.tokenFile)
	if err != nil {
		return 0, err
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := *c.base
	u.Path = path
	if c.namespace != "" {
		// Every route takes it: only that namespace is considered.
		u.RawQuery = url.Values{"namespace": {c.namespace}}.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		// The error names the URL, never a header: no token in it.
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if out != nil && resp.StatusCode != http.StatusNoContent {
			if err := json.Unmarshal(raw, out); err != nil {
				return resp.StatusCode, fmt.Errorf("%s %s: answer %d is not the API's JSON: %w", method, path, resp.StatusCode, err)
			}
		}
		return resp.StatusCode, nil
	}
	ae := decodeError(resp, raw)
	if ae.Code == CodeNotLeader {
		// A Service picks a backend per connection: a kept-alive one to a
		// follower would stay pinned to it. The follower closes it
		// (Connection: close); drop every idle one too, so the retry
		// dials again and can land on the leader.
		c.hc.CloseIdleConnections()
	}
	return resp.StatusCode, ae
}

func decodeError(resp *http.Response, raw []byte) *APIError {
	var b wire.Error
	e := &APIError{Status: resp.StatusCode}
	if err := json.Unmarshal(raw, &b); err != nil || b.Error == "" {
		e.Code = "http_" + strconv.Itoa(resp.StatusCode)
		e.Message = "the answer is not the deployment API's JSON (is the server URL right?)"
	} else {
		e.Code, e.Message, e.Holder, e.Reason, e.Generation, e.OperationID = b.Error, b.Message, b.Holder, b.Reason, b.TopologyGeneration, b.OperationID
	}
	// A hint, bounded: a huge value must neither overflow nor park the
	// client past any deadline it keeps.
	secs := b.RetryAfterSeconds
	if secs <= 0 {
		if s, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64); err == nil {
			secs = s
		}
	}
	if secs > 0 {
		e.RetryAfter = time.Duration(min(secs, maxRetryAfterSeconds)) * time.Second
	}
	return e
}

// maxRetryAfterSeconds bounds a server's Retry-After hint.
const maxRetryAfterSeconds = 300
