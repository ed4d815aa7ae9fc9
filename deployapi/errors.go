package deployapi

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/shipstream/bloodraven/deployapi/authn"
	"github.com/shipstream/bloodraven/deployclient/wire"
	"github.com/shipstream/bloodraven/store"
)

// Error codes of the contract (docs/api.md), as package wire defines them;
// unavailable and internal are outside the contract's table: the API server
// failed or throttled us, or we failed.
const (
	codeBadRequest       = wire.CodeBadRequest
	codeUnauthenticated  = wire.CodeUnauthenticated
	codeForbidden        = wire.CodeForbidden
	codeMigrationNotHeld = wire.CodeMigrationNotHeld
	codeTokenMismatch    = wire.CodeTokenMismatch
	codeNotFound         = wire.CodeNotFound
	codeHeld             = wire.CodeHeld
	codeRevoked          = wire.CodeRevoked
	codeVerification     = wire.CodeVerificationRequired
	codeBudgetExhausted  = wire.CodeDeferralBudgetExhausted
	codeTooLarge         = wire.CodeTooLarge
	codeUnstable         = wire.CodeUnstable
	codeMethodNotAllowed = wire.CodeMethodNotAllowed
	codeNotLeader        = wire.CodeNotLeader
	codeRateLimited      = wire.CodeRateLimited
	codeUnavailable      = wire.CodeUnavailable
	codeInternal         = wire.CodeInternal
)

// apiError is a typed API failure; writeError turns it into the contract's
// JSON. The members of extra other than Error are added to the body.
type apiError struct {
	status     int
	code       string
	extra      wire.Error
	retryAfter int
	// cause is logged, never sent.
	cause error
}

func (e *apiError) Error() string {
	if e.cause != nil {
		return e.code + ": " + e.cause.Error()
	}
	return e.code
}

func errBadRequest(msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, code: codeBadRequest, extra: wire.Error{Message: msg}}
}

var (
	errUnauthenticated  = &apiError{status: http.StatusUnauthorized, code: codeUnauthenticated}
	errForbidden        = &apiError{status: http.StatusForbidden, code: codeForbidden}
	errMigrationNotHeld = &apiError{status: http.StatusForbidden, code: codeMigrationNotHeld}
	errTokenMismatch    = &apiError{status: http.StatusForbidden, code: codeTokenMismatch}
	errNotFound         = &apiError{status: http.StatusNotFound, code: codeNotFound}
	errTooLarge         = &apiError{status: http.StatusRequestEntityTooLarge, code: codeTooLarge}
	errMethodNotAllowed = &apiError{status: http.StatusMethodNotAllowed, code: codeMethodNotAllowed}
	errNotLeader        = &apiError{status: http.StatusServiceUnavailable, code: codeNotLeader}
)

// unstableRetryAfterSeconds is what 423 tells the caller to wait.
const unstableRetryAfterSeconds = 2

func errUnstable() *apiError {
	return &apiError{status: http.StatusLocked, code: codeUnstable,
		extra: wire.Error{RetryAfterSeconds: unstableRetryAfterSeconds}, retryAfter: unstableRetryAfterSeconds}
}

func errHeld(operationID, instance string, expiresAt time.Time) *apiError {
	return &apiError{status: http.StatusConflict, code: codeHeld, extra: wire.Error{
		Holder: &wire.Holder{OperationID: operationID, Instance: instance, ExpiresAt: formatTime(expiresAt)},
	}}
}

func errRevoked(reason string, generation int64) *apiError {
	return &apiError{status: http.StatusConflict, code: codeRevoked,
		extra: wire.Error{Reason: reason, TopologyGeneration: generation}}
}

// deferralBudgetRetryAfterSeconds is the retryAfterSeconds of 409
// deferral_budget_exhausted: the planned operation proceeds at once, and
// holds are granted again once it has run, which takes tens of seconds.
const deferralBudgetRetryAfterSeconds = 30

// errDeferralBudgetExhausted answers a failover-hold grant while a planned
// operation's deferral budget is spent and the operation has not run.
func errDeferralBudgetExhausted() *apiError {
	return &apiError{status: http.StatusConflict, code: codeBudgetExhausted,
		extra:      wire.Error{RetryAfterSeconds: deferralBudgetRetryAfterSeconds},
		retryAfter: deferralBudgetRetryAfterSeconds}
}

// errVerificationRequired answers a migration grant for an instance whose
// last run lost authority past its DDL boundary (docs/gate.md): op is that
// operation, generation the topology generation it was granted under.
func errVerificationRequired(op string, generation int64) *apiError {
	return &apiError{status: http.StatusConflict, code: codeVerification,
		extra: wire.Error{OperationID: op, TopologyGeneration: generation}}
}

// errRevocationNotWritten answers a request whose lease must be revoked
// when the revocation cannot be written (the API server, or an admission
// policy, refused it): 503, retry. Never a release in its place.
func errRevocationNotWritten(cause error) *apiError {
	if ae := errFromAPIServer(cause); ae.status == http.StatusServiceUnavailable {
		return ae
	}
	return &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, retryAfter: 1, cause: cause}
}

// errFromAuthn maps a failed authentication: 401 unauthenticated; 503
// unavailable with Retry-After when the review may not be sent now (the
// cause is logged, never sent); otherwise the review's error, as any
// failed API-server call.
func errFromAuthn(err error) error {
	switch {
	case errors.Is(err, authn.ErrUnauthenticated):
		return errUnauthenticated
	case errors.Is(err, authn.ErrBusy):
		return &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, retryAfter: authn.BusyRetryAfterSeconds, cause: err}
	}
	return err
}

// errFromAPIServer maps a failed API-server call: 503 unavailable with
// Retry-After when the API server failed us (apiServerFailed), 500
// internal for anything else.
func errFromAPIServer(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	if errors.Is(err, store.ErrContended) {
		return &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, retryAfter: 1, cause: err}
	}
	if apiServerFailed(err) {
		retry := 1
		if s, ok := apierrors.SuggestsClientDelay(err); ok && s > 0 {
			retry = s
		}
		return &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, retryAfter: retry, cause: err}
	}
	return &apiError{status: http.StatusInternalServerError, code: codeInternal, cause: err}
}

// apiServerFailed tells whether err says the API server throttled us,
// failed (a 5xx of its own, etcd unavailable), could not be reached
// (connection refused or reset, a timeout: client-go wraps every transport
// failure in a *url.Error, and timeouts, context deadlines and syscall
// errors are net.Errors), or refused the operator's own credentials (401 or
// 403: an API server just restarted serves before its RBAC caches are
// filled; a missing permission shows the same way and is in the log).
// Nothing the caller sends differently would help; the request may be
// retried.
func apiServerFailed(err error) bool {
	var ne net.Error
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsServiceUnavailable(err) ||
		apierrors.IsTimeout(err) || apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err) ||
		apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) ||
		errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF)
}

func (e *apiError) body() wire.Error {
	b := e.extra
	b.Error = e.code
	return b
}

func (e *apiError) headers(h http.Header) {
	if e.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	if e.code == codeNotLeader {
		// A follower must not keep the caller's connection: a Service
		// picks a backend per connection, so a kept-alive one would stay
		// pinned to this replica (docs/api.md, "Leader routing").
		h.Set("Connection", "close")
	}
}

// formatTime is the wire form of a timestamp: RFC 3339 in UTC with Z.
func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
