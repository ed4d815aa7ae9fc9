package deployapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/julienschmidt/httprouter"
	"k8s.io/apimachinery/pkg/util/validation"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/deployapi/authn"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/store"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// call is one request, parsed: the route and every input a handler acts on.
// It is built from the path and the body before authorization and is not
// changed afterwards; the request's log line and metrics are derived from
// it and from the result.
type call struct {
	route       string
	identity    authn.Identity
	group       string
	kind        leases.Kind
	operationID string
	// instance is the grant's instance: only that database may authorize
	// the caller. Empty on the other routes.
	instance string
	// token is the lease token (the renewal's body, the release's
	// X-Lease-Token header). Never logged.
	token string
	ttl   ttlField
	// phase is a migration renewal's phase, empty when omitted.
	phase leases.Phase
	// outcome is a migration release's X-Deploy-Outcome, empty when
	// omitted.
	outcome leases.Outcome
	// wait is how long a lease GET may be held (Prefer: wait=N); zero
	// answers at once.
	wait time.Duration
	// namespace is the ?namespace= query parameter: when set, only that
	// namespace is considered (docs/api.md, "Resolved (tenants)").
	namespace string
	// ticket is the request's place in its identity's fair share.
	ticket *ticket
}

// leaseRoute reports whether the call names a lease of its caller (the
// lease GET, PUT and DELETE): such a call is settled by the lease itself.
func (c *call) leaseRoute() bool {
	switch c.route {
	case "get_lease", "renew", "release":
		return true
	}
	return false
}

// parseNamespaceQuery reads the optional ?namespace= parameter of every
// route: a namespace name, given at most once.
func parseNamespaceQuery(r *http.Request, c *call) *apiError {
	vals, ok := r.URL.Query()["namespace"]
	if !ok {
		return nil
	}
	if len(vals) != 1 {
		return errBadRequest("namespace may be given once")
	}
	if errs := validation.IsDNS1123Label(vals[0]); len(errs) > 0 {
		return errBadRequest("namespace must be a namespace name")
	}
	c.namespace = vals[0]
	return nil
}

// result is what a handler answers. instance is the lease's instance when
// the handler learned it (for the log line).
type result struct {
	status   int
	body     any
	err      error
	instance string
}

func ok(status int, body any) result { return result{status: status, body: body} }
func fail(err error) result          { return result{err: err} }

// parser builds the call of a route from the path and the body: 400 and 413
// come from here, after authentication and before authorization.
type parser func(r *http.Request, ps httprouter.Params, c *call) *apiError

// action acts on a parsed, authorized call; g is the group, read fresh.
type action func(r *http.Request, c *call, g *bloodravenv1alpha1.MysqlFailoverGroup) result

// route is one endpoint of the API.
type route struct {
	name  string
	parse parser
	act   action
}

func parseGroupPath(ps httprouter.Params, c *call) *apiError {
	g := ps.ByName("group")
	if errs := validation.IsDNS1123Subdomain(g); len(errs) > 0 {
		return errBadRequest("group must be a MysqlFailoverGroup name")
	}
	c.group = g
	return nil
}

func parseLeasePath(ps httprouter.Params, c *call) *apiError {
	if e := parseGroupPath(ps, c); e != nil {
		return e
	}
	op := ps.ByName("operationId")
	if e := validateOperationID(op); e != nil {
		return e
	}
	c.operationID = op
	kind, e := parseKind(ps.ByName("kind"))
	if e != nil {
		return e
	}
	c.kind = kind
	return nil
}

// parseGetGroup: GET /deploy/v1/groups/{group}.
func parseGetGroup(_ *http.Request, ps httprouter.Params, c *call) *apiError {
	return parseGroupPath(ps, c)
}

// parseGrant: POST /deploy/v1/groups/{group}/leases with a grant body.
func parseGrant(r *http.Request, ps httprouter.Params, c *call) *apiError {
	if e := parseGroupPath(ps, c); e != nil {
		return e
	}
	body, e := readBody(r)
	if e != nil {
		return e
	}
	req, kind, e := decodeGrant(body)
	if e != nil {
		return e
	}
	c.kind, c.operationID, c.instance, c.ttl = kind, req.OperationID, req.Instance, req.TTLSeconds
	return nil
}

// parseRenew: PUT /deploy/v1/groups/{group}/leases/{kind}/{operationId}
// with a renewal body.
func parseRenew(r *http.Request, ps httprouter.Params, c *call) *apiError {
	if e := parseLeasePath(ps, c); e != nil {
		return e
	}
	body, e := readBody(r)
	if e != nil {
		return e
	}
	req, phase, e := decodeRenew(body, c.kind)
	if e != nil {
		return e
	}
	c.token, c.ttl, c.phase = req.Token, req.TTLSeconds, phase
	return nil
}

// parseRelease: DELETE /deploy/v1/groups/{group}/leases/{kind}/{operationId}
// with the X-Lease-Token header.
func parseRelease(r *http.Request, ps httprouter.Params, c *call) *apiError {
	if e := parseLeasePath(ps, c); e != nil {
		return e
	}
	c.token = r.Header.Get("X-Lease-Token")
	vals := r.Header.Values(leases.OutcomeHeader)
	switch {
	case len(vals) == 0:
		return nil
	case len(vals) > 1:
		return errBadRequest(leases.OutcomeHeader + " must be given at most once")
	case c.kind != leases.KindMigration:
		return errBadRequest(leases.OutcomeHeader + " is for the migration lease only")
	}
	o, ok := leases.ParseOutcome(vals[0])
	if !ok {
		return errBadRequest(leases.OutcomeHeader + ` must be "succeeded", "failed", "lost-before-ddl", "lost-after-ddl" or "abort-failed"`)
	}
	c.outcome = o
	return nil
}

// refusal is the answer to a decision that grants, renews and releases
// nothing; nil for the outcomes that act. It is the one map from policy's
// outcomes to the contract's errors. generation is the group's current
// topology generation (409 revoked reports it).
func refusal(d policy.Decision, generation int64) *apiError {
	switch d.Outcome {
	case policy.OutcomeHeld:
		return errHeld(d.Holder.OperationID, d.Holder.Instance, d.Holder.ExpiresAt)
	case policy.OutcomeMigrationNotHeld:
		return errMigrationNotHeld
	case policy.OutcomeRevoked:
		return errRevoked(d.Reason, generation)
	case policy.OutcomeRevokeStale:
		return errRevoked(leases.ReasonTopologyChanged, generation)
	case policy.OutcomeTokenMismatch:
		return errTokenMismatch
	case policy.OutcomeNotFound:
		return errNotFound
	case policy.OutcomeUnstable, policy.OutcomeGrantInFlight:
		return errUnstable()
	case policy.OutcomeDeferralBudgetExhausted:
		return errDeferralBudgetExhausted()
	case policy.OutcomeVerificationRequired:
		return errVerificationRequired(d.Gate.OperationID, d.Gate.Generation)
	}
	return nil
}

// mustConfirm reports whether a refusal must be confirmed against the API
// server before it is answered: the lease cache may lag a grant, a re-grant,
// a release or a revocation. The fence (stale generation) and instability
// come from the group, which is always read fresh.
func mustConfirm(o policy.LeaseOutcome) bool {
	switch o {
	case policy.OutcomeHeld, policy.OutcomeMigrationNotHeld, policy.OutcomeRevoked,
		policy.OutcomeTokenMismatch, policy.OutcomeNotFound, policy.OutcomeNothingToRelease, policy.OutcomeVerificationRequired,
		policy.OutcomeGrantInFlight:
		return true
	}
	return false
}

func groupView(g *bloodravenv1alpha1.MysqlFailoverGroup) policy.GroupView {
	_, revokePending := g.Annotations[bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation]
	return policy.GroupView{
		UID:           string(g.UID),
		Generation:    g.Status.TopologyGeneration,
		MovedAt:       leasestore.MoveOf(g).At,
		Transition:    g.Status.Transition != nil,
		Reservation:   g.Status.Reservation != nil,
		RevokePending: revokePending,
		// Read from the group as the request read it, fresh: the
		// controller writes a spent budget before it revokes the holds.
		DeferralBudgetSpent: policy.DeferralBudgetSpent(g.Status.DeferralBudgets),
	}
}

// rereadGroup reads g again from the API server: a decision found a record
// newer than the request's view of the group.
func (s *Server) rereadGroup(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup) (*bloodravenv1alpha1.MysqlFailoverGroup, error) {
	fresh, err := s.readGroup(ctx, s.api, g.Namespace, g.Name)
	if err != nil {
		return nil, err
	}
	if fresh.UID != g.UID {
		return nil, fmt.Errorf("group %s/%s was re-created during the request: %w", g.Namespace, g.Name, store.ErrContended)
	}
	return fresh, nil
}

// staleView re-reads *g and asks for another attempt: a decision met a
// record newer than the request's view of the group.
func (s *Server) staleView(ctx context.Context, g **bloodravenv1alpha1.MysqlFailoverGroup) error {
	fresh, err := s.rereadGroup(ctx, *g)
	if err != nil {
		return err
	}
	*g = fresh
	return store.ErrStale
}

// revokeMoved revokes operation for the move (topology_changed) and, once
// written, moves *g to the group the revocation read, to decide again on.
func (s *Server) revokeMoved(ctx context.Context, g **bloodravenv1alpha1.MysqlFailoverGroup, operation string) (leasestore.Revocation, error) {
	rev, err := s.leases.Revoke(ctx, *g, operation, leases.ReasonTopologyChanged)
	if err == nil {
		*g = afterRevocation(*g, rev)
	}
	return rev, err
}

// afterRevocation is the group to decide again on once a revocation was
// written: the one the revocation read, when it is the same incarnation.
func afterRevocation(g *bloodravenv1alpha1.MysqlFailoverGroup, rev leasestore.Revocation) *bloodravenv1alpha1.MysqlFailoverGroup {
	if rev.Group != nil && rev.Group.UID == g.UID {
		return rev.Group
	}
	return g
}
