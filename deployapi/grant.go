package deployapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/deployclient/wire"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/store"
	"github.com/shipstream/bloodraven/store/deployrun"
	"github.com/shipstream/bloodraven/store/gate"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// POST /deploy/v1/groups/{group}/leases: grant or re-grant a lease.

// bodyOf is the answer to a renewal and a lease GET, and (with the token)
// to a grant. Namespace is the group's, the one the request was settled in
// (docs/api.md "Resolved (tenants)"); Phase is on the migration lease only.
func bodyOf(rec *leases.Record, namespace string) wire.Lease {
	b := wire.Lease{Kind: string(rec.Kind), OperationID: rec.OperationID, Instance: rec.Instance,
		ExpiresAt: formatTime(rec.ExpiresAt), TopologyGeneration: rec.Generation, TTLSeconds: rec.TTLSeconds, Namespace: namespace}
	if rec.Kind == leases.KindMigration {
		b.Phase = wire.Phase(rec.Phase.Effective())
	}
	return b
}

// grant decides on the cached mutex (and hold) and writes with their
// resourceVersion; a refusal is confirmed on fresh reads first: the leases,
// then the group. The tombstone is always read fresh: tombstones are not
// cached.
func (s *Server) grant(r *http.Request, c *call, g *bloodravenv1alpha1.MysqlFailoverGroup) result {
	ctx := r.Context()
	if !g.DeletionTimestamp.IsZero() {
		return fail(errForbidden) // a group being deleted takes no grant: as if it were gone
	}
	tomb, err := s.leases.Tombstone(ctx, g, c.operationID)
	if err != nil {
		return fail(err)
	}
	name := leases.LeaseName(c.kind, g.Name, c.operationID)
	var res result
	err = store.Retry(func(fresh bool) error {
		mig, err := s.leases.Get(ctx, g.Namespace, leases.MigrationName(g.Name), fresh)
		if err != nil {
			return err
		}
		target := mig
		if c.kind == leases.KindFailoverHold {
			if target, err = s.leases.Get(ctx, g.Namespace, name, fresh); err != nil {
				return err
			}
		}
		if fresh {
			// A refusal is decided on a group read after the leases: a
			// record they show was written before this read, so a record
			// written after a move is judged at the move's generation (an
			// operation's grant in flight that landed after the move, about
			// to be withdrawn: 423, never 409 held naming an operation that
			// never held the mutex). The group read before the leases
			// (authorization's) could predate that move.
			if g, err = s.readGroup(ctx, s.api, g.Namespace, g.Name); err != nil {
				return err
			}
			if !g.DeletionTimestamp.IsZero() {
				return errForbidden
			}
		}
		now := s.clock.Now()
		var verification policy.VerificationView
		if c.kind == leases.KindMigration {
			// The gate is read fresh, after the mutex: a gate closed by
			// whoever took the mutex over from an unconfirmed DDL was
			// written before that take-over, so it is seen here.
			m := leasestore.RecordOf(mig)
			if !m.BelongsTo(string(g.UID)) {
				m = nil
			}
			if verification, err = gate.View(ctx, s.api, g.Namespace, c.instance, m, now); err != nil {
				return err
			}
		}
		d := policy.DecideGrant(policy.GrantInput{
			Kind: c.kind, OperationID: c.operationID, Instance: c.instance, Identity: c.identity.Username(),
			Group: groupView(g), Tombstone: tomb, Migration: leasestore.RecordOf(mig), Hold: leasestore.RecordOf(target),
			Verification: verification, Now: now,
		})
		switch d.Outcome {
		case policy.OutcomeCloseGate:
			// The mutex holds an ended operation's unconfirmed DDL: record
			// it on its database before anything may overwrite it, then
			// decide again.
			if _, err := gate.Close(ctx, s.api, s.leases.Client, g.Namespace, d.Gate, now); err != nil {
				return err
			}
			return store.ErrStale
		case policy.OutcomeCreate, policy.OutcomeTakeOver, policy.OutcomeRegrant:
			if d.Outcome == policy.OutcomeCreate {
				target = nil
			}
			res, err = s.writeGrant(ctx, c, g, name, target, d.Outcome, now)
			return err
		case policy.OutcomeStaleView:
			return s.staleView(ctx, &g)
		case policy.OutcomeRevokeStale:
			// A record held authority when the topology moved: revoke its
			// operation first, whoever's it is, then decide again on what
			// the revocation left (and the group it read).
			if _, err := s.revokeMoved(ctx, &g, d.RevokeOperation); err != nil {
				return err
			}
			if tomb, err = s.leases.Tombstone(ctx, g, c.operationID); err != nil {
				return err
			}
			return store.ErrStale
		}
		if mustConfirm(d.Outcome) && !fresh {
			return store.ErrStale
		}
		if e := refusal(d, g.Status.TopologyGeneration); e != nil {
			return e
		}
		return fmt.Errorf("unexpected grant outcome %d", d.Outcome)
	})
	if err != nil {
		return fail(err)
	}
	return res
}

// writeGrant stores a new record with a fresh token over target (nil: create).
func (s *Server) writeGrant(ctx context.Context, c *call, g *bloodravenv1alpha1.MysqlFailoverGroup, name string, target *leasestore.Object,
	outcome policy.LeaseOutcome, now time.Time) (result, error) {
	token, err := leases.NewToken()
	if err != nil {
		return result{}, err
	}
	grant := leases.Grant{Group: g.Name, GroupUID: string(g.UID), Kind: c.kind, OperationID: c.operationID,
		Instance: c.instance, Identity: c.identity.Username(), Generation: g.Status.TopologyGeneration,
		TTLSeconds: policy.ClampTTL(c.ttl.ptr(), leases.DefaultTTLSeconds)}
	if outcome == policy.OutcomeRegrant && target != nil {
		// A re-grant continues the operation's tenure, and keeps the phase
		// it reached.
		grant.HeldSince, grant.Phase = target.Record.HeldSince, target.Record.Phase
	}
	rec := leases.NewGrant(grant, leases.HashToken(token), now)
	written, err := s.leases.Put(ctx, g, name, target, rec)
	if err != nil {
		return result{}, err
	}
	if outcome == policy.OutcomeTakeOver && target != nil && c.kind == leases.KindMigration {
		// The write replaced an ended operation's record, which its
		// resourceVersion proves was final: its run records how it ended
		// now, since nobody can read that record afterwards.
		s.syncRun(ctx, g, target.Record)
	}
	var replaced *leases.Record
	if target != nil {
		replaced = target.Record
	}
	if err := s.confirmGrant(ctx, g, written, replaced, outcome == policy.OutcomeRegrant); err != nil {
		return result{}, err
	}
	if rec.Kind == leases.KindMigration {
		s.startRun(ctx, g, &rec, outcome != policy.OutcomeRegrant)
	}
	status := http.StatusCreated
	if outcome == policy.OutcomeRegrant {
		status = http.StatusOK
	}
	return ok(status, wire.Grant{Lease: bodyOf(&rec, g.Namespace), Token: token}), nil
}

// confirmGrant re-reads the group after a grant was written, and withdraws
// the grant (deletes the Lease it wrote, answers 423) when either:
//   - the topology generation moved past the one the grant was written at:
//     the group was read before a move and the write landed after it, so the
//     lease was fenced before it existed, and the controller may already have
//     revoked what it saw without seeing this lease;
//   - for a failover-hold, a reservation or transition appeared: the
//     controller writes its reservation, then reads holds; the API writes the
//     hold, then reads the reservation. Of the two, at least one sees the
//     other, and if it is the API, the hold is withdrawn. This holds for
//     every hold grant, a re-grant included;
//   - the revoke annotation appeared: the controller lists leases only once
//     the annotation is present, so a grant written after its list is
//     withdrawn here.
//
// A withdrawn new grant is deleted, not released: it never held authority,
// and a released record would look, to the fence, like an operation that was
// live at the move (its retry must be granted, not answered 409 revoked).
// The controller's bookkeeping may see it first: it deletes it too
// (leases.WithdrawnByMove), never revokes it. A withdrawn grant that replaced
// a record (prev: a re-grant's own record, or the ended record a take-over
// overwrote) puts that record back: its operation still holds what it held,
// or ended as it ended, so the controller's revocation (the move's, the
// annotation's) still finds it; deleting it would erase a live operation, or
// the evidence that an ended one was live at the move. A re-grant
// (regrant) overtaken by a move is revoked (topology_changed, 409): its
// operation held a live lease at the old generation, which the move fences.
//
// A grant that answers 201 (or 200) was therefore, at one instant after its
// write, at the group's current generation and, for a hold, unopposed by a
// planned operation.
func (s *Server) confirmGrant(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, written *leasestore.Object, prev *leases.Record, regrant bool) error {
	rec := written.Record
	fresh := &bloodravenv1alpha1.MysqlFailoverGroup{}
	if err := s.api.Get(ctx, client.ObjectKeyFromObject(g), fresh); err != nil {
		return fmt.Errorf("re-read group after grant: %w", err)
	}
	if !policy.GrantOvertaken(rec.Kind, rec.Generation, groupView(fresh)) {
		return nil
	}
	switch {
	case regrant && fresh.Status.TopologyGeneration != rec.Generation:
		rev, err := s.leases.Revoke(ctx, fresh, rec.OperationID, leases.ReasonTopologyChanged)
		if err != nil {
			return err
		}
		return errRevoked(leases.ReasonTopologyChanged, afterRevocation(fresh, rev).Status.TopologyGeneration)
	case prev != nil:
		if _, err := s.leases.Update(ctx, g, written, *prev); err != nil && !apierrors.IsConflict(err) {
			return err
		}
	default:
		if err := s.leases.Delete(ctx, written); err != nil && !apierrors.IsConflict(err) {
			return err
		}
	}
	return errUnstable()
}

// syncRun brings the DeployRun of rec's operation up to date with rec
// (deployrun.SyncFresh). A failure is logged and fails nothing:
// the run is history, not authority, and the group controller's bookkeeping
// writes it on its next pass from the same record.
func (s *Server) syncRun(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, rec *leases.Record) {
	if rec != nil {
		s.logRunError(deployrun.SyncFresh(ctx, s.api, s.leases.Client, g, rec, s.clock.Now()), g, rec)
	}
}

// startRun writes the run of a confirmed grant: created without a read
// first when the grant began a tenure (deployrun.Begin), synced otherwise.
func (s *Server) startRun(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, rec *leases.Record, tenure bool) {
	if !tenure {
		s.syncRun(ctx, g, rec)
		return
	}
	s.logRunError(deployrun.Begin(ctx, s.api, s.leases.Client, g, rec, s.clock.Now()), g, rec)
}

func (s *Server) logRunError(err error, g *bloodravenv1alpha1.MysqlFailoverGroup, rec *leases.Record) {
	if err != nil {
		s.log.Error(err, "DeployRun not written; the group controller writes it from the lease record",
			"group", g.Name, "namespace", g.Namespace, "operationId", rec.OperationID)
	}
}
