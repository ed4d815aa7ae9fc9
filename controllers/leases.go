package controllers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/store/deployrun"
	"github.com/shipstream/bloodraven/store/gate"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// leasePass says which bookkeeping steps a pass of reconcileLeases runs.
type leasePass struct {
	// fresh reads the leases from the API server at once (the promotion,
	// right after the generation moved, when the cache may not hold a lease
	// granted just before); otherwise the cache proposes and a fresh read
	// confirms.
	fresh bool
	// history runs the history step (the verification gate and the
	// DeployRuns). The promotion's pass, and every pass whose safety step
	// acted on the data plane, leave it out: that reconcile is urgent, and
	// it requeues the group at once, at the priority its new state earns
	// (ordinary, once the primary is settled), where the history follows.
	history bool
}

// promotionPass is the promotion's pass of reconcileLeases: it fences, on
// fresh reads, and leaves the history to the next pass.
var promotionPass = leasePass{fresh: true}

// reconcileLeases makes the stored deployment leases match their effect,
// as named steps in a fixed order:
//
//  1. fence (fence): revoke what the revoke annotation or a newer
//     generation fences, and announce those revocations;
//  2. ends (recordEnds): record expiries; delete leftovers of a deleted
//     group of the same name and history past its ttl;
//  3. announcements (announcePending): announce the revocations the
//     deployment API wrote (a renewal, release or re-grant that noticed
//     the move first);
//  4. history (followMigration): the migration's verification gate and
//     its DeployRuns; only in a pass with p.history.
//
// It is its own reconcile step: a failing Lease read or write (throttling,
// a denied update, a broken object) is logged and retried after
// bookkeepingRetry, and never stops the safety paths, which ran before it
// and read no lease. The fence does not depend on it: the deployment API
// compares every lease's generation with the group's on every request.
func (r *GroupReconciler) reconcileLeases(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, st *passOutcome, p leasePass) {
	recheck, err := r.bookkeep(ctx, g, p)
	if st != nil && !recheck.IsZero() {
		st.after(recheck.Sub(r.Clock.Now()))
	}
	if err != nil {
		log.FromContext(ctx).Error(err, "lease bookkeeping failed; the fence still holds, retrying",
			"retryAfter", bookkeepingRetry.String(), "topologyGeneration", g.Status.TopologyGeneration)
		if r.Metrics != nil {
			r.Metrics.BookkeepingErrors.WithLabelValues(g.Namespace, g.Name).Inc()
		}
		if st != nil {
			st.after(bookkeepingRetry)
		}
	}
}

// bookkeep runs the steps of p. It decides from the cache; only a decision
// that would write (a revocation, an expiry, a foreign lease) is taken
// again from a fresh read, and the writes carry the resourceVersions of
// that read. A routine pass with nothing to do costs the API server
// nothing.
//
// recheck, when set, is when a fenced record that may be a grant in flight
// is to be decided again (policy.Bookkeeping.RecheckAt).
func (r *GroupReconciler) bookkeep(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, p leasePass) (recheck time.Time, err error) {
	d, objOf, err := r.decideLeases(ctx, g, p.fresh)
	if err != nil {
		return time.Time{}, err
	}
	mig, fenceErr := r.fence(ctx, g, d, objOf)
	errs := []error{fenceErr, r.recordEnds(ctx, g, d, objOf), r.announcePending(ctx, g)}
	if p.history {
		errs = append(errs, r.followMigration(ctx, g, mig))
	}
	return d.RecheckAt, errors.Join(errs...)
}

// decideLeases is policy.DecideBookkeeping on the group's leases: read from
// the cache unless fresh, and read again fresh when the cached decision
// would write anything (or the revoke annotation stands).
func (r *GroupReconciler) decideLeases(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, fresh bool) (policy.Bookkeeping, map[*leases.Record]*leasestore.Object, error) {
	_, annotated := g.Annotations[bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation]
	move := leasestore.MoveOf(g)
	decide := func(fresh bool) (policy.Bookkeeping, map[*leases.Record]*leasestore.Object, error) {
		objs, err := r.Leases.ListObjects(ctx, g.Namespace, g.Name, fresh)
		if err != nil {
			return policy.Bookkeeping{}, nil, err
		}
		recs, objOf := leasestore.Records(objs)
		return policy.DecideBookkeeping(policy.BookkeepingInput{Now: r.Clock.Now(), GroupUID: string(g.UID),
			Generation: move.Generation, MovedAt: move.At, RevokeAll: annotated, Leases: recs}), objOf, nil
	}
	d, objOf, err := decide(fresh)
	if err != nil || fresh {
		return d, objOf, err
	}
	if annotated || len(d.Revoke) > 0 || len(d.Expire) > 0 || len(d.Foreign) > 0 || len(d.Delete) > 0 {
		return decide(true)
	}
	return d, objOf, nil
}

// fence is step 1: it revokes d.Revoke and, when the revoke annotation
// stands and those revocations succeeded, removes it and revokes the grants
// that landed behind it (revokeLateGrants). mig is the group's migration
// record as it stands after the step: what a revocation wrote, else what
// was read.
func (r *GroupReconciler) fence(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, d policy.Bookkeeping, objOf map[*leases.Record]*leasestore.Object) (mig *leases.Record, err error) {
	mig = migrationOf(objOf)
	written, err := r.revoke(ctx, g, d.Revoke, d.Reason)
	if w := leases.MigrationOf(written); w != nil {
		mig = w // what the revocation wrote, not what was read
	}
	if _, annotated := g.Annotations[bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation]; err != nil || !annotated {
		return mig, err
	}
	removedAt := r.Clock.Now()
	patch := client.MergeFrom(g.DeepCopy())
	delete(g.Annotations, bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation)
	if err := r.Client.Patch(ctx, g, patch); err != nil {
		return mig, fmt.Errorf("remove %s: %w", bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation, err)
	}
	w, err := r.revokeLateGrants(ctx, g, removedAt)
	if m := leases.MigrationOf(w); m != nil {
		mig = m
	}
	return mig, err
}

// recordEnds is step 2. Each write carries the resourceVersion the decision
// was made on: a record that changed since (a renewal) is left for the next
// pass. Foreign records, and holds ended longer ago than their ttl (history
// is bounded), are deleted.
func (r *GroupReconciler) recordEnds(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, d policy.Bookkeeping, objOf map[*leases.Record]*leasestore.Object) error {
	var errs []error
	for _, rec := range d.Expire {
		if _, err := r.Leases.Update(ctx, g, objOf[rec], rec.Expired()); err != nil && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("record %s lease of %s as expired: %w", rec.Kind, rec.OperationID, err))
		}
	}
	for _, rec := range append(d.Foreign, d.Delete...) {
		if err := r.Leases.Delete(ctx, objOf[rec]); err != nil && !apierrors.IsConflict(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// announcePending is step 3: the revocations the deployment API wrote (a
// renewal, release or re-grant that noticed the move first) are announced
// here, once (announce).
func (r *GroupReconciler) announcePending(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup) error {
	pending, err := r.Leases.PendingTombstones(ctx, g.Namespace, g.Name)
	return errors.Join(err, r.announce(ctx, g, pending))
}

// followMigration is step 4, the history: a migration that ended past its
// DDL boundary without confirming its end closes its database's gate (the
// deployment API closes it too, before it takes such a mutex over; whoever
// comes first writes it), and the group's DeployRuns follow mig.
func (r *GroupReconciler) followMigration(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, mig *leases.Record) error {
	return errors.Join(r.closeGate(ctx, g, mig), r.syncRuns(ctx, g, mig))
}

// revokeLateGrants revokes (operator_revoked) every operation with a live
// lease granted before removedAt, the moment the revoke annotation was
// removed, that the revocation's list did not see: a grant that read the
// group before the annotation appeared and wrote its Lease after that list
// passes its confirming read when that read comes after the removal
// (deployapi.confirmGrant withdraws it only while the annotation stands).
// Every grant decided while the annotation stood answered 423, so a live
// record granted before the removal is one the annotation was meant to end.
// Grants decided after the removal are not touched.
func (r *GroupReconciler) revokeLateGrants(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, removedAt time.Time) ([]leases.Record, error) {
	recs, err := r.Leases.List(ctx, g.Namespace, g.Name, true)
	if err != nil {
		return nil, err
	}
	return r.revoke(ctx, g, policy.LateGrants(recs, string(g.UID), removedAt, r.Clock.Now()), leases.ReasonOperatorRevoked)
}

// migrationOf is the group's migration record among the records read.
func migrationOf(objOf map[*leases.Record]*leasestore.Object) *leases.Record {
	for rec := range objOf {
		if rec.Kind == leases.KindMigration {
			return rec
		}
	}
	return nil
}

// runListTimeout bounds the cached read of the group's DeployRuns, so a
// cache that cannot sync (RBAC taken away) slows the bookkeeping and never
// holds a reconcile.
const runListTimeout = 5 * time.Second

// syncRuns keeps the group's DeployRuns (deployrun) in step with m, its
// migration record (nil: none): the run of m's operation is written when
// missing or behind, runs m displaced are recorded ended, and the history
// is pruned. Reads come from the cache; writes carry the resourceVersions
// read, and policy.RunStatus never lets a stale read move a run back.
func (r *GroupReconciler) syncRuns(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, m *leases.Record) error {
	if !m.BelongsTo(string(g.UID)) {
		m = nil
	}
	lctx, cancel := context.WithTimeout(ctx, runListTimeout)
	defer cancel()
	runs, err := deployrun.List(lctx, r.Client, g)
	if err != nil {
		return err
	}
	var errs []error
	now := r.Clock.Now()
	if m != nil {
		// A missing run is written only for a record older than a grant's
		// confirmation (policy.RunBackstopDue): a younger one may be a grant
		// about to be withdrawn, which leaves no run.
		if err := deployrun.Sync(ctx, r.Client, r.Client, g, m, now, policy.RunBackstopDue(m, now)); err != nil && !deployrun.IsRace(err) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, deployrun.Lost(ctx, r.Client, runs, m, now), deployrun.Prune(ctx, r.Client, g, runs))
	return errors.Join(errs...)
}

// closeGate records m's unconfirmed DDL on its database, when m has one
// that the (cached) database does not account for yet; gate.Close confirms
// on a fresh read. The database controller announces it.
func (r *GroupReconciler) closeGate(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, m *leases.Record) error {
	now := r.Clock.Now()
	if !m.BelongsTo(string(g.UID)) || !m.UnconfirmedDDL(now) {
		return nil
	}
	db := &bloodravenv1alpha1.MysqlDatabase{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: g.Namespace, Name: m.Instance}, db); err != nil {
		return client.IgnoreNotFound(err)
	}
	if policy.GateRecorded(&db.Status, m) {
		return nil
	}
	if _, err := gate.Close(ctx, r.API, r.Client, g.Namespace, m, now); err != nil {
		return err
	}
	return nil
}

// revoke revokes each operation; the tombstones written are announced.
// written are the records the revocations rewrote.
func (r *GroupReconciler) revoke(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, ops []string, reason string) (written []leases.Record, err error) {
	var tombs []*leasestore.Object
	var errs []error
	for _, op := range ops {
		rev, err := r.Leases.Revoke(ctx, g, op, reason)
		if err != nil {
			errs = append(errs, fmt.Errorf("revoke operation %s: %w", op, err))
		}
		if rev.Tombstone != nil {
			tombs = append(tombs, rev.Tombstone)
		}
		written = append(written, rev.Records...)
	}
	if err := r.announce(ctx, g, tombs); err != nil {
		errs = append(errs, err)
	}
	return written, errors.Join(errs...)
}

// announce announces each pending tombstone once, whoever wrote it: it
// clears the tombstone's AnnouncePending with the resourceVersion it read,
// and only the writer that succeeds emits DeploymentLeaseRevoked (one Event
// per reason and generation, naming the operations) and counts the
// revocations. A tombstone already announced, or changed since it was read,
// is left to whoever changed it. A crash between the write and the Event
// loses that Event; it never repeats one.
func (r *GroupReconciler) announce(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, tombs []*leasestore.Object) error {
	type key struct {
		reason string
		gen    int64
	}
	byKey := map[key][]string{}
	var keys []key
	var errs []error
	for _, t := range tombs {
		if !t.Record.BelongsTo(string(g.UID)) {
			continue
		}
		ok, err := r.Leases.Announce(ctx, g, t)
		if err != nil {
			errs = append(errs, fmt.Errorf("announce revocation of %s: %w", t.Record.OperationID, err))
		}
		if !ok {
			continue
		}
		k := key{t.Record.Reason, t.Record.Generation}
		if _, seen := byKey[k]; !seen {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], t.Record.OperationID)
	}
	for _, k := range keys {
		ops := byKey[k]
		sort.Strings(ops)
		EventDeploymentLeaseRevoked.emit(r.Recorder, g, k.reason, k.gen, ops)
		r.Metrics.revoked(g, k.reason, len(ops), r.Clock.Now())
	}
	return errors.Join(errs...)
}
