package deployapi

import (
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/leasestore"
	"github.com/shipstream/bloodraven/policy"
)

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
		UID:         string(g.UID),
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
		Operations: operationsJSON{UpdatePhase: string(st.UpdatePhase), RestoreInPlace: string(st.RestoreInPlace), DragonflyUpgrade: string(st.DragonflyUpgrade)},
		Stable:     stable, UnstableReason: reason,
		Leases: []leaseJSON{},
	}
	if pf := st.PlannedFailover; pf != nil {
		out.Operations.PlannedFailover = plannedJSON{Phase: string(pf.Phase), Reason: pf.Reason}
	}
	for _, rec := range leases.Effective(recs, string(g.UID), s.clock.Now()) {
		{
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
	if !g.DeletionTimestamp.IsZero() {
		return 0, nil, errForbidden // a group being deleted takes no grant: as if it were gone
	}
	tomb, err := s.leases.Tombstone(r.ctx, g, req.OperationID)
	if err != nil {
		return 0, nil, err
	}
	ttl := policy.ClampTTL(req.TTLSeconds.ptr(), policy.DefaultTTLSeconds)
	name := leases.LeaseName(kind, g.Name, req.OperationID)
	var status int
	var answer any
	err = leasestore.Optimistic(func(fresh bool) error {
		mig, err := s.leases.Get(r.ctx, g.Namespace, leases.MigrationName(g.Name), fresh)
		if err != nil {
			return err
		}
		target := mig
		if kind == leases.KindFailoverHold {
			if target, err = s.leases.Get(r.ctx, g.Namespace, name, fresh); err != nil {
				return err
			}
		}
		now := s.clock.Now()
		d := policy.DecideGrant(policy.GrantInput{
			Kind: kind, OperationID: req.OperationID, Instance: req.Instance, Identity: r.identity.Username(),
			Group: groupView(g), Tombstone: tomb, Migration: leasestore.RecordOf(mig), Hold: leasestore.RecordOf(target), Now: now,
		})
		switch d.Outcome {
		case policy.OutcomeCreate, policy.OutcomeTakeOver, policy.OutcomeRegrant:
			token, err := leases.NewToken()
			if err != nil {
				return err
			}
			rec := leases.NewGrant(leases.Grant{Group: g.Name, GroupUID: string(g.UID), Kind: kind, OperationID: req.OperationID,
				Instance: req.Instance, Identity: r.identity.Username(), Generation: g.Status.TopologyGeneration, TTLSeconds: ttl},
				leases.HashToken(token), now)
			if d.Outcome == policy.OutcomeCreate {
				target = nil
			}
			if _, err := s.leases.Put(r.ctx, g, name, target, rec); err != nil {
				return err
			}
			if kind == leases.KindFailoverHold {
				// The controller writes its reservation, then reads holds; we
				// wrote the hold, now read the reservation. Of the two, at
				// least one sees the other: if we see it, we withdraw. This
				// holds for every hold grant, a re-grant included.
				if err := s.withdrawIfReserved(r, g, rec); err != nil {
					return err
				}
			}
			status, answer = http.StatusCreated, grantJSON{leaseBody: bodyOf(&rec), Token: token}
			if d.Outcome == policy.OutcomeRegrant {
				status = http.StatusOK
			}
			return nil
		case policy.OutcomeRevokeStale:
			if _, err := s.leases.Revoke(r.ctx, g, d.RevokeOperation, leases.ReasonTopologyChanged); err != nil {
				return err
			}
			return leasestore.ErrStale // decide again on what the revocation left
		case policy.OutcomeHeld:
			if !fresh { // confirm against the API server before refusing
				return leasestore.ErrStale
			}
			return errHeld(d.Holder.OperationID, d.Holder.Instance, d.Holder.ExpiresAt)
		case policy.OutcomeMigrationNotHeld:
			if !fresh {
				return leasestore.ErrStale
			}
			return errMigrationNotHeld
		case policy.OutcomeRevoked:
			return errRevoked(d.Reason, g.Status.TopologyGeneration)
		case policy.OutcomeUnstable:
			return errUnstable()
		}
		return fmt.Errorf("unexpected grant outcome %d", d.Outcome)
	})
	if err != nil {
		return 0, nil, err
	}
	return status, answer, nil
}

// withdrawIfReserved re-reads the group after a failover-hold was written;
// when a reservation or transition appeared meanwhile, it releases the hold
// it wrote and answers 423.
func (s *Server) withdrawIfReserved(r *request, g *v1.MysqlFailoverGroup, rec leases.Record) error {
	fresh := &v1.MysqlFailoverGroup{}
	if err := s.api.Get(r.ctx, client.ObjectKeyFromObject(g), fresh); err != nil {
		return fmt.Errorf("re-read group after hold grant: %w", err)
	}
	if fresh.Status.Reservation == nil && fresh.Status.Transition == nil {
		return nil
	}
	_, err := s.leases.Transition(r.ctx, g, leases.KindFailoverHold, rec.OperationID, func(cur *leases.Record) (leases.Record, bool) {
		if cur.TokenHash != rec.TokenHash || cur.State != leases.StateActive {
			return leases.Record{}, false
		}
		return cur.Released(s.clock.Now()), true
	})
	if err != nil {
		return err
	}
	return errUnstable()
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

// loadOwn reads the operation's Lease of kind and its record (nil when it
// is not the operation's, or left over from a deleted group of the same
// name), and notes the instance for the log line.
func (s *Server) loadOwn(r *request, g *v1.MysqlFailoverGroup, kind leases.Kind, op string, fresh bool) (*leasestore.Object, *leases.Record, error) {
	obj, own, err := s.leases.GetOwn(r.ctx, g, kind, op, fresh)
	if own != nil {
		r.instance = own.Instance
	}
	return obj, own, err
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
	if !g.DeletionTimestamp.IsZero() {
		return 0, nil, errNotFound // the group's leases end with it
	}
	var answer leaseBody
	err = leasestore.Optimistic(func(fresh bool) error {
		obj, own, err := s.loadOwn(r, g, kind, op, fresh)
		if err != nil {
			return err
		}
		var mig *leases.Record
		if kind == leases.KindFailoverHold && own != nil {
			// A hold lives only while its operation holds the live mutex. A
			// cached mutex is enough to renew: a release of the mutex also
			// rewrites the hold, so the write below conflicts.
			if mig, err = s.mutexRecord(r, g, fresh); err != nil {
				return err
			}
		}
		var tomb *leases.Record
		if own == nil && fresh {
			if tomb, err = s.leases.Tombstone(r.ctx, g, op); err != nil {
				return err
			}
		}
		now := s.clock.Now()
		d := policy.DecideRenew(policy.RenewInput{Kind: kind, OperationID: op, Token: req.Token, Group: groupView(g),
			Record: own, Migration: mig, Tombstone: tomb, Now: now})
		switch d.Outcome {
		case policy.OutcomeRenew:
			next := own.Renewed(policy.ClampTTL(req.TTLSeconds.ptr(), own.TTLSeconds), now)
			if _, err := s.leases.Update(r.ctx, g, obj, next); err != nil {
				return err
			}
			answer = bodyOf(&next)
			return nil
		case policy.OutcomeRevokeStale:
			// The token's grant generation is not the group's: the fence has
			// already ended this lease, whether or not its record can be
			// rewritten now (a failed write is logged with the answer).
			e := errRevoked(leases.ReasonTopologyChanged, g.Status.TopologyGeneration)
			if _, err := s.leases.Revoke(r.ctx, g, op, leases.ReasonTopologyChanged); err != nil {
				e.cause = err
			}
			return e
		case policy.OutcomeUnstable:
			return errUnstable()
		}
		// Every refusal is confirmed against the API server: the cache may
		// lag a grant, a re-grant or a revocation.
		if !fresh {
			return leasestore.ErrStale
		}
		switch d.Outcome {
		case policy.OutcomeRevoked:
			return errRevoked(d.Reason, g.Status.TopologyGeneration)
		case policy.OutcomeNotFound:
			return errNotFound
		case policy.OutcomeTokenMismatch:
			return errTokenMismatch
		}
		return fmt.Errorf("unexpected renew outcome %d", d.Outcome)
	})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, answer, nil
}

// mutexRecord is the group's migration mutex record (nil when absent).
func (s *Server) mutexRecord(r *request, g *v1.MysqlFailoverGroup, fresh bool) (*leases.Record, error) {
	o, err := s.leases.Get(r.ctx, g.Namespace, leases.MigrationName(g.Name), fresh)
	return leasestore.RecordOf(o), err
}

// ---- DELETE /deploy/v1/groups/{group}/leases/{kind}/{operationId}

func (s *Server) release(r *request) (int, any, error) {
	g, kind, op, err := s.leaseRoute(r, nil)
	if err != nil {
		return 0, nil, err
	}
	token := r.http.Header.Get("X-Lease-Token")
	err = leasestore.Optimistic(func(fresh bool) error {
		obj, own, err := s.loadOwn(r, g, kind, op, fresh)
		if err != nil {
			return err
		}
		now := s.clock.Now()
		d := policy.DecideRelease(own, token, now)
		if d.Outcome == policy.OutcomeRelease {
			if kind == leases.KindMigration {
				// The operation's hold dies with its mutex; end its record
				// first, so a renewal decided on a cached mutex conflicts.
				if err := s.releaseHold(r, g, op, now); err != nil {
					return err
				}
			}
			_, err := s.leases.Update(r.ctx, g, obj, own.Released(now))
			return err
		}
		if !fresh {
			return leasestore.ErrStale
		}
		if d.Outcome == policy.OutcomeTokenMismatch {
			return errTokenMismatch
		}
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, nil
}

// releaseHold releases operation's failover-hold, if it is active.
func (s *Server) releaseHold(r *request, g *v1.MysqlFailoverGroup, op string, now time.Time) error {
	_, err := s.leases.Transition(r.ctx, g, leases.KindFailoverHold, op, func(cur *leases.Record) (leases.Record, bool) {
		if cur.State != leases.StateActive {
			return leases.Record{}, false
		}
		return cur.Released(now), true
	})
	return err
}
