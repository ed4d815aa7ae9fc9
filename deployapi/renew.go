package deployapi

import (
	"context"
	"fmt"
	"net/http"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/store"
	"github.com/shipstream/bloodraven/store/deployrun"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// PUT and DELETE /deploy/v1/groups/{group}/leases/{kind}/{operationId}:
// renew and release a lease.

// renew decides on the cached record and writes with its resourceVersion:
// a steady renewal costs the authorization GET, the group GET (the fence)
// and one Lease PUT. Every refusal but the fence's and 423 is confirmed on
// fresh reads first.
func (s *Server) renew(r *http.Request, c *call, g *bloodravenv1alpha1.MysqlFailoverGroup) result {
	ctx := r.Context()
	if !g.DeletionTimestamp.IsZero() {
		return fail(errNotFound) // the group's leases end with it
	}
	var res result
	err := store.Retry(func(fresh bool) error {
		obj, own, mig, tomb, err := s.leaseRecords(ctx, c, g, fresh)
		if err != nil {
			return err
		}
		if own != nil {
			res.instance = own.Instance
		}
		now := s.clock.Now()
		d := policy.DecideRenew(policy.RenewInput{Kind: c.kind, OperationID: c.operationID, Token: c.token, TTLSeconds: c.ttl.ptr(), Phase: c.phase,
			Group: groupView(g), Record: own, Migration: mig, Tombstone: tomb, Now: now})
		switch d.Outcome {
		case policy.OutcomeRenew:
			if _, err := s.leases.Update(ctx, g, obj, *d.Next); err != nil {
				return err
			}
			res.status, res.body = http.StatusOK, bodyOf(d.Next, g.Namespace)
			return nil
		case policy.OutcomeStaleView:
			return s.staleView(ctx, &g)
		case policy.OutcomeRevokeStale:
			// The lease held authority when the topology moved. A live one
			// is ended by the fence whether or not its record can be
			// rewritten now (a failed write is logged with the answer); an
			// ended one is revoked and answered from its new record.
			if _, err := s.revokeMoved(ctx, &g, c.operationID); err != nil {
				if own.Live(now) {
					e := refusal(d, g.Status.TopologyGeneration)
					e.cause = err
					return e
				}
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
		return fmt.Errorf("unexpected renew outcome %d", d.Outcome)
	})
	if err != nil {
		res.err = err
	}
	return res
}

// leaseRecords reads what a decision about the call's lease needs: its
// object and record (nil when another operation or incarnation holds the
// name), for a failover-hold its group's migration mutex (a hold lives only
// while its operation holds the live mutex; a cached mutex is enough to
// renew, since a release of the mutex also rewrites the hold, so a write
// decided on it conflicts), and, on a fresh read of an absent record, the
// operation's tombstone (tombstones are not cached).
func (s *Server) leaseRecords(ctx context.Context, c *call, g *bloodravenv1alpha1.MysqlFailoverGroup, fresh bool) (obj *leasestore.Object, own, mig, tomb *leases.Record, err error) {
	obj, own, err = s.leases.GetOwn(ctx, g, c.kind, c.operationID, fresh)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if c.kind == leases.KindFailoverHold && own != nil {
		o, err := s.leases.Get(ctx, g.Namespace, leases.MigrationName(g.Name), fresh)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		mig = leasestore.RecordOf(o)
	}
	if own == nil && fresh {
		if tomb, err = s.leases.Tombstone(ctx, g, c.operationID); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	return obj, own, mig, tomb, nil
}

// release ends a live lease whose token matches; anything not live is
// already released (204). Releasing the mutex releases the operation's hold
// first.
func (s *Server) release(r *http.Request, c *call, g *bloodravenv1alpha1.MysqlFailoverGroup) result {
	ctx := r.Context()
	res := result{status: http.StatusNoContent}
	// ended is the migration record this release or its revocation wrote;
	// gone tells that the operation's record was replaced.
	var ended *leases.Record
	var gone bool
	err := store.Retry(func(fresh bool) error {
		ended = nil
		obj, own, err := s.leases.GetOwn(ctx, g, c.kind, c.operationID, fresh)
		if err != nil {
			return err
		}
		gone = own == nil
		if own != nil {
			res.instance = own.Instance
		}
		now := s.clock.Now()
		d := policy.DecideRelease(own, c.token, groupView(g), now)
		switch d.Outcome {
		case policy.OutcomeStaleView:
			return s.staleView(ctx, &g)
		case policy.OutcomeRevokeStale:
			// The lease held authority when the topology moved: its end is a
			// revocation, recorded as such (tombstone), and answered 204. A
			// revocation that cannot be written is an error, never a
			// release: the record stays for the controller to revoke.
			rev, err := s.revokeMoved(ctx, &g, d.RevokeOperation)
			if err != nil {
				return errRevocationNotWritten(err)
			}
			if rev.Tombstone != nil && c.outcome == "" {
				ended = leases.MigrationOf(rev.Records)
				return nil
			}
			// Decide again on what the revocation left: a report goes on
			// the revoked record (below).
			return store.ErrStale
		}
		if d.Outcome == policy.OutcomeRelease {
			if c.kind == leases.KindMigration {
				// The operation's hold dies with its mutex; end its record
				// first, so a renewal decided on a cached mutex conflicts.
				if err := s.releaseHold(r, g, c.operationID); err != nil {
					return err
				}
			}
			next := d.Next.Reported(c.outcome)
			if _, err := s.leases.Update(ctx, g, obj, next); err != nil {
				return err
			}
			ended = &next
			return nil
		}
		if d.Outcome == policy.OutcomeNothingToRelease {
			// Authority ended before the release (revoked, expired): the
			// client's outcome is still recorded, on the ended record.
			if next, report := policy.DecideReport(own, c.token, c.outcome, now); report {
				if _, err := s.leases.Update(ctx, g, obj, next); err != nil {
					return err
				}
				ended = &next
				return nil
			}
		}
		if mustConfirm(d.Outcome) && !fresh {
			return store.ErrStale
		}
		if e := refusal(d, g.Status.TopologyGeneration); e != nil {
			return e
		}
		return nil // nothing to release
	})
	if err != nil {
		res.err = err
		return res
	}
	if gone && c.outcome != "" {
		// The operation's record was replaced (another operation took the
		// mutex since): the report goes to its run, if its revocation's
		// tombstone proves the token was the operation's.
		s.reportAfterReplacement(ctx, g, c)
	}
	s.syncRun(ctx, g, ended)
	return res
}

// reportAfterReplacement records c's outcome on the run of c's operation
// when its record is gone and its tombstone holds the hash of c's token.
// Records that were released or expired before being replaced leave no
// tombstone: their report is not recorded (docs/api.md says so).
func (s *Server) reportAfterReplacement(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, c *call) {
	tomb, err := s.leases.Tombstone(ctx, g, c.operationID)
	if err == nil && (tomb == nil || !tomb.BelongsTo(string(g.UID)) || !tomb.RevokedToken(c.token)) {
		return
	}
	if err == nil {
		err = deployrun.Report(ctx, s.api, s.leases.Client, g, tomb.Instance, c.operationID, tomb.TenureStart(), c.outcome, s.clock.Now())
	}
	if err != nil {
		s.log.Error(err, "the outcome reported on release was not recorded", "group", g.Name,
			"namespace", g.Namespace, "operationId", c.operationID, "outcome", string(c.outcome))
	}
}

// releaseHold releases operation's failover-hold, if it is active.
func (s *Server) releaseHold(r *http.Request, g *bloodravenv1alpha1.MysqlFailoverGroup, op string) error {
	_, err := s.leases.Transition(r.Context(), g, leases.KindFailoverHold, op, func(cur *leases.Record) (leases.Record, bool) {
		if cur.State != leases.StateActive {
			return leases.Record{}, false
		}
		return cur.Released(s.clock.Now()), true
	})
	return err
}
