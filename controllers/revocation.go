package controllers

import (
	"context"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
)

// reconcileRevocations ends what must end: on the revoke annotation every
// live lease (operator_revoked), then removes the annotation; any live lease
// granted under another generation (topology_changed); and marks active
// leases past their expiry as expired. Idempotent across restarts: each pass
// reads the leases fresh and revokes only what is still live.
func (r *GroupReconciler) reconcileRevocations(ctx context.Context, g *v1.MysqlFailoverGroup) error {
	recs, err := r.Leases.List(ctx, g.Namespace, g.Name, true)
	if err != nil {
		return err
	}
	now := r.Clock.Now()
	_, annotated := g.Annotations[v1.RevokeDeploymentLeasesAnnotation]
	var ops []string
	seen := map[string]bool{}
	for _, rec := range recs {
		if !rec.Live(now) || seen[rec.OperationID] {
			continue
		}
		if annotated || rec.Generation != g.Status.TopologyGeneration {
			seen[rec.OperationID] = true
			ops = append(ops, rec.OperationID)
		}
	}
	if annotated {
		if err := r.revoke(ctx, g, ops, leases.ReasonOperatorRevoked); err != nil {
			return err
		}
		patch := client.MergeFrom(g.DeepCopy())
		delete(g.Annotations, v1.RevokeDeploymentLeasesAnnotation)
		if err := r.Client.Patch(ctx, g, patch); err != nil {
			return fmt.Errorf("remove %s: %w", v1.RevokeDeploymentLeasesAnnotation, err)
		}
	} else if err := r.revoke(ctx, g, ops, leases.ReasonTopologyChanged); err != nil {
		return err
	}
	return r.markExpired(ctx, g)
}

// revokeStale revokes every live lease granted under another generation.
func (r *GroupReconciler) revokeStale(ctx context.Context, g *v1.MysqlFailoverGroup) error {
	recs, err := r.Leases.List(ctx, g.Namespace, g.Name, true)
	if err != nil {
		return err
	}
	now := r.Clock.Now()
	var ops []string
	seen := map[string]bool{}
	for _, rec := range recs {
		if rec.Live(now) && rec.Generation != g.Status.TopologyGeneration && !seen[rec.OperationID] {
			seen[rec.OperationID] = true
			ops = append(ops, rec.OperationID)
		}
	}
	return r.revoke(ctx, g, ops, leases.ReasonTopologyChanged)
}

// revoke revokes each operation and emits one Event for the batch.
func (r *GroupReconciler) revoke(ctx context.Context, g *v1.MysqlFailoverGroup, ops []string, reason string) error {
	if len(ops) == 0 {
		return nil
	}
	sort.Strings(ops)
	var revoked []string
	for _, op := range ops {
		recs, err := r.Leases.Revoke(ctx, g, op, reason)
		if err != nil {
			return fmt.Errorf("revoke operation %s: %w", op, err)
		}
		if len(recs) > 0 {
			revoked = append(revoked, op)
		}
	}
	if len(revoked) > 0 {
		EventDeploymentLeaseRevoked.emit(r.Recorder, g, reason, g.Status.TopologyGeneration, revoked)
	}
	return nil
}

// markExpired records the end of active leases whose expiry has passed, so
// the stored state matches their effect.
func (r *GroupReconciler) markExpired(ctx context.Context, g *v1.MysqlFailoverGroup) error {
	objs, err := r.Leases.ListObjects(ctx, g.Namespace, g.Name, true)
	if err != nil {
		return err
	}
	now := r.Clock.Now()
	for _, o := range objs {
		if o.Record.State != leases.StateActive || !now.After(o.Record.ExpiresAt) {
			continue
		}
		next := *o.Record
		next.State = leases.StateExpired
		if _, err := r.Leases.Update(ctx, o, &next); err != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("mark lease %s expired: %w", o.Lease.Name, err)
		}
	}
	return nil
}
