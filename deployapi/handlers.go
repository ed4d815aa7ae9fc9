package deployapi

import (
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/policy"
)

// maxAttempts bounds the optimistic-concurrency loops: each attempt re-reads
// after a Conflict or AlreadyExists from the API server.
const maxAttempts = 8

var errContended = &apiError{status: http.StatusServiceUnavailable, code: codeUnavailable, retryAfter: 1,
	cause: errors.New("lease still conflicting after retries")}

// groupParam validates the {group} path parameter and records it for logs.
func groupParam(r *request) (string, *apiError) {
	g := r.params.ByName("group")
	r.group = g
	if errs := validation.IsDNS1123Subdomain(g); len(errs) > 0 {
		r.group = "" // not a name; keep arbitrary text out of logs
		return "", errBadRequest("group must be a MysqlFailoverGroup name")
	}
	return g, nil
}

func (s *Server) authorizeReq(r *request, group, instance string) (*v1.MysqlFailoverGroup, error) {
	g, err := s.authorize(r.ctx, r.identity, group, instance)
	if err != nil {
		return nil, err
	}
	r.authorized, r.namespace = true, g.Namespace
	return g, nil
}

func groupView(g *v1.MysqlFailoverGroup) policy.GroupView {
	return policy.GroupView{
		Generation:  g.Status.TopologyGeneration,
		Transition:  g.Status.Transition != nil,
		Reservation: g.Status.Reservation != nil,
	}
}

// ---- GET /deploy/v1/groups/{group}

type healthJSON struct {
	Ready                 bool    `json:"ready"`
	DegradedReason        string  `json:"degradedReason"`
	ReplicationRunning    bool    `json:"replicationRunning"`
	ReplicationLagSeconds float64 `json:"replicationLagSeconds"`
	RecoveryPending       bool    `json:"recoveryPending"`
}

type plannedJSON struct {
	Phase  string `json:"phase"`
	Reason string `json:"reason"`
}

type operationsJSON struct {
	PlannedFailover  plannedJSON `json:"plannedFailover"`
	UpdatePhase      string      `json:"updatePhase"`
	RestoreInPlace   string      `json:"restoreInPlace"`
	DragonflyUpgrade string      `json:"dragonflyUpgrade"`
}

type leaseJSON struct {
	Kind               string `json:"kind"`
	OperationID        string `json:"operationId"`
	Instance           string `json:"instance"`
	ExpiresAt          string `json:"expiresAt"`
	TopologyGeneration int64  `json:"topologyGeneration"`
}

type groupJSON struct {
	Group              string         `json:"group"`
	Namespace          string         `json:"namespace"`
	ActiveSite         string         `json:"activeSite"`
	TopologyGeneration int64          `json:"topologyGeneration"`
	Health             healthJSON     `json:"health"`
	Operations         operationsJSON `json:"operations"`
	Stable             bool           `json:"stable"`
	UnstableReason     string         `json:"unstableReason"`
	Leases             []leaseJSON    `json:"leases"`
}

func (s *Server) getGroup(r *request) (int, any, error) {
	group, e := groupParam(r)
	if e != nil {
		return 0, nil, e
	}
	g, err := s.authorizeReq(r, group, "")
	if err != nil {
		return 0, nil, err
	}
	recs, err := s.leases.List(r.ctx, g.Namespace, g.Name, false)
	if err != nil {
		return 0, nil, err
	}
	st := &g.Status
	stable, reason := policy.Stability(st)
	out := groupJSON{
		Group: g.Name, Namespace: g.Namespace, ActiveSite: st.ActiveSite, TopologyGeneration: st.TopologyGeneration,
		Health: healthJSON{
			Ready: st.Health.Ready, DegradedReason: st.Health.DegradedReason, ReplicationRunning: st.Health.ReplicationRunning,
			ReplicationLagSeconds: st.Health.ReplicationLagSeconds, RecoveryPending: st.Health.RecoveryPending,
		},
		Operations: operationsJSON{UpdatePhase: st.UpdatePhase, RestoreInPlace: st.RestoreInPlace, DragonflyUpgrade: st.DragonflyUpgrade},
		Stable:     stable, UnstableReason: reason,
		Leases: []leaseJSON{},
	}
	if pf := st.PlannedFailover; pf != nil {
		out.Operations.PlannedFailover = plannedJSON{Phase: string(pf.Phase), Reason: pf.Reason}
	}
	now := s.clock.Now()
	for _, rec := range recs {
		if rec.Live(now) {
			out.Leases = append(out.Leases, leaseJSON{Kind: string(rec.Kind), OperationID: rec.OperationID, Instance: rec.Instance,
				ExpiresAt: formatTime(rec.ExpiresAt), TopologyGeneration: rec.Generation})
		}
	}
	return http.StatusOK, out, nil
}

// ---- POST /deploy/v1/groups/{group}/leases

// leaseBody is the answer to a renewal, and (with the token) to a grant.
type leaseBody struct {
	Kind               string `json:"kind"`
	OperationID        string `json:"operationId"`
	Instance           string `json:"instance"`
	ExpiresAt          string `json:"expiresAt"`
	TopologyGeneration int64  `json:"topologyGeneration"`
	TTLSeconds         int64  `json:"ttlSeconds"`
}

func bodyOf(rec *leases.Record) leaseBody {
	return leaseBody{Kind: string(rec.Kind), OperationID: rec.OperationID, Instance: rec.Instance,
		ExpiresAt: formatTime(rec.ExpiresAt), TopologyGeneration: rec.Generation, TTLSeconds: rec.TTLSeconds}
}

type grantJSON struct {
	leaseBody
	Token string `json:"token"`
}

func (s *Server) grant(r *request) (int, any, error) {
	group, e := groupParam(r)
	if e != nil {
		return 0, nil, e
	}
	body, e := readBody(r.http)
	if e != nil {
		return 0, nil, e
	}
	req, kind, e := decodeGrant(body)
	if e != nil {
		return 0, nil, e
	}
	r.instance, r.operationID = req.Instance, req.OperationID
	g, err := s.authorizeReq(r, group, req.Instance)
	if err != nil {
		return 0, nil, err
	}
	tomb, err := s.leases.Tombstone(r.ctx, g.Namespace, g.Name, req.OperationID)
	if err != nil {
		return 0, nil, err
	}
	ttl := policy.ClampTTL(req.TTLSeconds.ptr(), policy.DefaultTTLSeconds)
	migName := leases.MigrationName(g.Name)
	holdName := leases.HoldName(g.Name, req.OperationID)
	fresh := false
	for attempt := 0; attempt < maxAttempts; attempt++ {
		mig, err := s.leases.Get(r.ctx, g.Namespace, migName, fresh)
		if err != nil {
			return 0, nil, err
		}
		var hold *leases.Object
		if kind == leases.KindFailoverHold {
			if hold, err = s.leases.Get(r.ctx, g.Namespace, holdName, fresh); err != nil {
				return 0, nil, err
			}
		}
		now := s.clock.Now()
		d := policy.DecideGrant(policy.GrantInput{
			Kind: kind, OperationID: req.OperationID, Instance: req.Instance, Identity: r.identity.Username(),
			Group: groupView(g), Tombstone: tomb, Migration: recordOf(mig), Hold: recordOf(hold), Now: now,
		})
		target, name := mig, migName
		if kind == leases.KindFailoverHold {
			target, name = hold, holdName
		}
		switch d.Outcome {
		case policy.OutcomeCreate, policy.OutcomeTakeOver, policy.OutcomeRegrant:
			token, err := leases.NewToken()
			if err != nil {
				return 0, nil, err
			}
			rec := &leases.Record{
				Group: g.Name, Kind: kind, OperationID: req.OperationID, Instance: req.Instance, Identity: r.identity.Username(),
				State: leases.StateActive, Generation: g.Status.TopologyGeneration, TTLSeconds: ttl,
				ExpiresAt: leases.ExpiryAt(now, ttl), GrantedAt: now, RenewedAt: now, TokenHash: leases.HashToken(token),
			}
			if d.Outcome == policy.OutcomeCreate {
				_, err = s.leases.Create(r.ctx, g, name, rec)
			} else {
				_, err = s.leases.Update(r.ctx, target, rec)
			}
			if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
				fresh = true
				continue
			}
			if err != nil {
				return 0, nil, err
			}
			if kind == leases.KindFailoverHold && d.Outcome != policy.OutcomeRegrant {
				// The controller writes its reservation, then reads holds; we
				// wrote the hold, now read the reservation. Of the two, at
				// least one sees the other: if we see it, we withdraw.
				if unstable, err := s.withdrawIfReserved(r, g, rec); err != nil || unstable {
					if err == nil {
						err = errUnstable()
					}
					return 0, nil, err
				}
			}
			status := http.StatusCreated
			if d.Outcome == policy.OutcomeRegrant {
				status = http.StatusOK
			}
			return status, grantJSON{leaseBody: bodyOf(rec), Token: token}, nil
		case policy.OutcomeRevokeStale:
			if _, err := s.leases.Revoke(r.ctx, g, d.RevokeOperation, leases.ReasonTopologyChanged); err != nil {
				return 0, nil, err
			}
			if d.RevokeOperation == req.OperationID {
				return 0, nil, errRevoked(leases.ReasonTopologyChanged, g.Status.TopologyGeneration)
			}
			fresh = true
		case policy.OutcomeHeld:
			if !fresh { // confirm against the API server before refusing
				fresh = true
				continue
			}
			return 0, nil, errHeld(d.Holder.OperationID, d.Holder.Instance, d.Holder.ExpiresAt)
		case policy.OutcomeMigrationNotHeld:
			if !fresh {
				fresh = true
				continue
			}
			return 0, nil, errMigrationNotHeld
		case policy.OutcomeRevoked:
			return 0, nil, errRevoked(d.Reason, g.Status.TopologyGeneration)
		case policy.OutcomeUnstable:
			return 0, nil, errUnstable()
		default:
			return 0, nil, fmt.Errorf("unexpected grant outcome %d", d.Outcome)
		}
	}
	return 0, nil, errContended
}

// withdrawIfReserved re-reads the group after a new failover-hold was written;
// when a reservation or transition appeared meanwhile, it releases the hold
// and reports true.
func (s *Server) withdrawIfReserved(r *request, g *v1.MysqlFailoverGroup, rec *leases.Record) (bool, error) {
	fresh := &v1.MysqlFailoverGroup{}
	if err := s.api.Get(r.ctx, client.ObjectKeyFromObject(g), fresh); err != nil {
		return false, fmt.Errorf("re-read group after hold grant: %w", err)
	}
	if fresh.Status.Reservation == nil && fresh.Status.Transition == nil {
		return false, nil
	}
	name := leases.HoldName(g.Name, rec.OperationID)
	for attempt := 0; attempt < maxAttempts; attempt++ {
		o, err := s.leases.Get(r.ctx, g.Namespace, name, true)
		if err != nil {
			return true, err
		}
		if o == nil || o.Record.TokenHash != rec.TokenHash || o.Record.State != leases.StateActive {
			return true, nil
		}
		next := *o.Record
		next.State = leases.StateReleased
		if _, err := s.leases.Update(r.ctx, o, &next); err == nil || !apierrors.IsConflict(err) {
			return true, err
		}
	}
	return true, errContended
}

func recordOf(o *leases.Object) *leases.Record {
	if o == nil {
		return nil
	}
	return o.Record
}

// leaseParams validates {kind} and {operationId}.
func leaseParams(r *request) (leases.Kind, string, *apiError) {
	op := r.params.ByName("operationId")
	if e := validateOperationID(op); e != nil {
		return "", "", e
	}
	r.operationID = op
	kind, e := parseKind(r.params.ByName("kind"))
	if e != nil {
		return "", "", e
	}
	return kind, op, nil
}

// leaseRoute checks a .../leases/{kind}/{operationId} request in the
// contract's order: the path, then the body's shape (shape, when set), then
// authorization. It returns the group read fresh.
func (s *Server) leaseRoute(r *request, shape func() *apiError) (*v1.MysqlFailoverGroup, leases.Kind, string, error) {
	group, e := groupParam(r)
	if e != nil {
		return nil, "", "", e
	}
	kind, op, e := leaseParams(r)
	if e != nil {
		return nil, "", "", e
	}
	if shape != nil {
		if e := shape(); e != nil {
			return nil, "", "", e
		}
	}
	g, err := s.authorizeReq(r, group, "")
	if err != nil {
		return nil, "", "", err
	}
	return g, kind, op, nil
}

// loadOwn reads the Lease name and the operation's record in it (for the
// migration mutex, only while op is the operation recorded), and notes the
// instance for the log line.
func (s *Server) loadOwn(r *request, namespace, name, op string, fresh bool) (*leases.Object, *leases.Record, error) {
	obj, err := s.leases.Get(r.ctx, namespace, name, fresh)
	if err != nil || obj == nil || obj.Record.OperationID != op {
		return obj, nil, err
	}
	r.instance = obj.Record.Instance
	return obj, obj.Record, nil
}

// ---- PUT /deploy/v1/groups/{group}/leases/{kind}/{operationId}

func (s *Server) renew(r *request) (int, any, error) {
	var req renewRequest
	g, kind, op, err := s.leaseRoute(r, func() *apiError {
		body, e := readBody(r.http)
		if e != nil {
			return e
		}
		req, e = decodeRenew(body)
		return e
	})
	if err != nil {
		return 0, nil, err
	}
	name := leases.LeaseName(kind, g.Name, op)
	fresh := false
	for attempt := 0; attempt < maxAttempts; attempt++ {
		obj, own, err := s.loadOwn(r, g.Namespace, name, op, fresh)
		if err != nil {
			return 0, nil, err
		}
		var tomb *leases.Record
		if own == nil && fresh {
			if tomb, err = s.leases.Tombstone(r.ctx, g.Namespace, g.Name, op); err != nil {
				return 0, nil, err
			}
		}
		now := s.clock.Now()
		d := policy.DecideRenew(policy.RenewInput{Kind: kind, OperationID: op, Token: req.Token, Group: groupView(g),
			Record: own, Tombstone: tomb, Now: now})
		switch d.Outcome {
		case policy.OutcomeRenew:
			ttl := policy.ClampTTL(req.TTLSeconds.ptr(), own.TTLSeconds)
			next := *own
			next.TTLSeconds, next.RenewedAt, next.ExpiresAt = ttl, now, leases.ExpiryAt(now, ttl)
			if _, err := s.leases.Update(r.ctx, obj, &next); apierrors.IsConflict(err) {
				fresh = true
				continue
			} else if err != nil {
				return 0, nil, err
			}
			return http.StatusOK, bodyOf(&next), nil
		case policy.OutcomeRevokeStale:
			if _, err := s.leases.Revoke(r.ctx, g, op, leases.ReasonTopologyChanged); err != nil {
				return 0, nil, err
			}
			return 0, nil, errRevoked(leases.ReasonTopologyChanged, g.Status.TopologyGeneration)
		case policy.OutcomeUnstable:
			return 0, nil, errUnstable()
		}
		// Every refusal is confirmed against the API server: the cache may
		// lag a grant, a re-grant or a revocation.
		if !fresh {
			fresh = true
			continue
		}
		switch d.Outcome {
		case policy.OutcomeRevoked:
			return 0, nil, errRevoked(d.Reason, g.Status.TopologyGeneration)
		case policy.OutcomeNotFound:
			return 0, nil, errNotFound
		case policy.OutcomeTokenMismatch:
			return 0, nil, errTokenMismatch
		default:
			return 0, nil, fmt.Errorf("unexpected renew outcome %d", d.Outcome)
		}
	}
	return 0, nil, errContended
}

// ---- DELETE /deploy/v1/groups/{group}/leases/{kind}/{operationId}

func (s *Server) release(r *request) (int, any, error) {
	g, kind, op, err := s.leaseRoute(r, nil)
	if err != nil {
		return 0, nil, err
	}
	token := r.http.Header.Get("X-Lease-Token")
	name := leases.LeaseName(kind, g.Name, op)
	fresh := false
	for attempt := 0; attempt < maxAttempts; attempt++ {
		obj, own, err := s.loadOwn(r, g.Namespace, name, op, fresh)
		if err != nil {
			return 0, nil, err
		}
		now := s.clock.Now()
		d := policy.DecideRelease(own, token, now)
		if d.Outcome == policy.OutcomeRelease {
			next := *own
			next.State, next.RenewedAt = leases.StateReleased, now
			if _, err := s.leases.Update(r.ctx, obj, &next); apierrors.IsConflict(err) {
				fresh = true
				continue
			} else if err != nil {
				return 0, nil, err
			}
			return http.StatusNoContent, nil, nil
		}
		if !fresh {
			fresh = true
			continue
		}
		if d.Outcome == policy.OutcomeTokenMismatch {
			return 0, nil, errTokenMismatch
		}
		return http.StatusNoContent, nil, nil
	}
	return 0, nil, errContended
}
