package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/leasestore"
	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/topology"
)

// Finalizer lets the controller delete the group's deployment leases and
// tombstones itself, also where no garbage collector runs.
const Finalizer = "bloodraven.shipstream.io/deployment-leases"

// Defaults of the reconciler's timers.
const (
	// DefaultProbeInterval is how often a quiet group is probed again.
	DefaultProbeInterval = 10 * time.Second
	// DefaultPromoteTimeout is how long a transition whose promotion keeps
	// failing stands before it is rolled back.
	DefaultPromoteTimeout = 2 * time.Minute
	// bookkeepingRetry is how soon failed lease bookkeeping is tried again.
	bookkeepingRetry = 5 * time.Second
	// waitRetry is how soon a waiting operation looks again.
	waitRetry = 5 * time.Second
)

// GroupReconciler reconciles MysqlFailoverGroups.
type GroupReconciler struct {
	// Client writes; API reads fresh (uncached) from the API server.
	Client client.Client
	API    client.Reader
	Leases *leasestore.Store
	// Driver acts on the data plane; nil means topology.None.
	Driver         topology.Driver
	Clock          clock.PassiveClock
	Recorder       record.EventRecorder
	Metrics        *Metrics
	ProbeInterval  time.Duration
	PromoteTimeout time.Duration
}

// step is the outcome of one part of a reconcile: when to look again.
type step struct {
	requeueAfter time.Duration
	// degraded, when set, overrides the probe's degraded reason (a site the
	// controller had to leave fenced).
	degraded string
}

func (s *step) after(d time.Duration) {
	if d > 0 && (s.requeueAfter == 0 || d < s.requeueAfter) {
		s.requeueAfter = d
	}
}

func (r *GroupReconciler) driver() topology.Driver {
	if r.Driver == nil {
		return topology.None{}
	}
	return r.Driver
}

// Reconcile brings one group a step closer to its desired state, in a fixed
// order that makes the safety rules structural:
//
//  1. the safety paths (probe, policy.DecideTopology, act) run first, from
//     their own inputs; they never read a deployment lease;
//  2. lease bookkeeping runs next as its own step; its errors are logged
//     and retried, and never return early;
//  3. the planned operations run behind the admission gate;
//  4. the observation is written to status, once, when it changed.
//
// A group being deleted keeps step 1 until it is gone: a finalizer that
// cannot complete (a denied Lease delete, another controller's finalizer)
// must not leave it without probing, emergency failover and fencing. Its
// finalizer takes the place of step 2, and step 3 stops: no grant is taken
// while the group is being deleted.
func (r *GroupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	g := &v1.MysqlFailoverGroup{}
	if err := r.API.Get(ctx, req.NamespacedName, g); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	deleting := !g.DeletionTimestamp.IsZero()
	if !deleting && !controllerutil.ContainsFinalizer(g, Finalizer) {
		controllerutil.AddFinalizer(g, Finalizer)
		if err := r.Client.Update(ctx, g); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
	}
	persisted := g.Status.DeepCopy()
	if !deleting {
		r.Metrics.initGroup(g) // every series exists, at 0, from the first reconcile
	}
	var st step
	st.after(r.probeInterval())

	// 1. Safety paths.
	sites, err := r.driver().Probe(ctx, g)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("probe: %w", err)
	}
	acted, err := r.reconcileTopology(ctx, g, sites, &st)
	// 2. Lease bookkeeping (the finalizer, for a group being deleted): after
	// step 1, and never in its way.
	if deleting {
		err = errors.Join(err, r.finalize(ctx, g))
	} else {
		r.reconcileLeases(ctx, g, &st)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if acted { // the data plane changed: probe again before anything else
		//lint:ignore SA1019 Requeue (with the rate limiter's backoff) is "probe again now"; no fixed RequeueAfter fits
		return ctrl.Result{Requeue: true}, nil
	}
	// 3. Planned operations.
	if !deleting {
		if err := r.reconcileOperations(ctx, g, sites, &st); err != nil {
			return ctrl.Result{}, err
		}
	}
	// 4. Observation.
	if sites, err = r.driver().Probe(ctx, g); err != nil {
		return ctrl.Result{}, fmt.Errorf("probe: %w", err)
	}
	r.observe(g, sites)
	if st.degraded != "" {
		g.Status.Health.DegradedReason = st.degraded
		setCondition(g, v1.ConditionDegraded, true, "SiteFenced", st.degraded, r.now())
	}
	if !equality.Semantic.DeepEqual(persisted, &g.Status) {
		if err := r.writeStatus(ctx, g); err != nil {
			if deleting { // its finalizer may have been the last
				err = client.IgnoreNotFound(err)
			}
			return ctrl.Result{}, err
		}
	}
	if !deleting {
		r.Metrics.observeGroup(g)
	}
	return ctrl.Result{RequeueAfter: st.requeueAfter}, nil
}

func (r *GroupReconciler) probeInterval() time.Duration {
	if r.ProbeInterval > 0 {
		return r.ProbeInterval
	}
	return DefaultProbeInterval
}

func (r *GroupReconciler) promoteTimeout() time.Duration {
	if r.PromoteTimeout > 0 {
		return r.PromoteTimeout
	}
	return DefaultPromoteTimeout
}

// writeStatus persists g.Status with g's resourceVersion; a Conflict means
// someone else wrote first and the reconcile is retried from fresh state.
func (r *GroupReconciler) writeStatus(ctx context.Context, g *v1.MysqlFailoverGroup) error {
	g.Status.ObservedGeneration = g.Generation
	if err := r.Client.Status().Update(ctx, g); err != nil {
		r.Metrics.statusWriteFailed(g, err)
		return fmt.Errorf("write status: %w", err)
	}
	return nil
}

func (r *GroupReconciler) now() metav1.Time { return metav1.NewTime(r.Clock.Now()) }

// observe writes health and conditions from a probe.
func (r *GroupReconciler) observe(g *v1.MysqlFailoverGroup, sites []topology.SiteState) {
	h, conds := policy.Observe(g.Status.ActiveSite, sites)
	g.Status.Health = h
	now := r.now()
	for _, c := range conds {
		setCondition(g, c.Type, c.True, c.Reason, c.Message, now)
	}
	held, reason := policy.AutomaticFailoverHeld(g.Status.PlannedFailover)
	setCondition(g, v1.ConditionAutomaticFailoverHeld, held, reason, "", now)
}

func setCondition(g *v1.MysqlFailoverGroup, typ string, val bool, reason, msg string, now metav1.Time) {
	status := metav1.ConditionFalse
	if val {
		status = metav1.ConditionTrue
	}
	c := metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: g.Generation, LastTransitionTime: now}
	if old := meta.FindStatusCondition(g.Status.Conditions, typ); old != nil && old.Status == status {
		c.LastTransitionTime = old.LastTransitionTime
	}
	meta.SetStatusCondition(&g.Status.Conditions, c)
}

// finalize deletes every deployment Lease and tombstone of the group, then
// releases the finalizer.
func (r *GroupReconciler) finalize(ctx context.Context, g *v1.MysqlFailoverGroup) error {
	if !controllerutil.ContainsFinalizer(g, Finalizer) {
		return nil
	}
	objs, err := r.Leases.ListAll(ctx, g.Namespace, g.Name)
	if err != nil {
		return fmt.Errorf("leases of deleted group: %w", err)
	}
	for _, o := range objs {
		if err := r.Client.Delete(ctx, o.Lease); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete lease %s: %w", o.Lease.Name, err)
		}
	}
	controllerutil.RemoveFinalizer(g, Finalizer)
	if err := r.Client.Update(ctx, g); err != nil {
		return fmt.Errorf("remove finalizer: %w", err)
	}
	r.Metrics.forget(g)
	return nil
}

// SetupWithManager registers the controller: groups, and the deployment
// Leases they own, filtered to changes that matter to admission.
func (r *GroupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1.MysqlFailoverGroup{}).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(leaseOwner),
			builder.WithPredicates(leaseDecisionChanged())).
		Complete(r)
}

// leaseOwner maps a deployment Lease to its group.
func leaseOwner(_ context.Context, obj client.Object) []reconcile.Request {
	for _, o := range obj.GetOwnerReferences() {
		if o.Kind == "MysqlFailoverGroup" && o.APIVersion == v1.GroupVersion.String() {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: o.Name}}}
		}
	}
	return nil
}

// leaseDecisionChanged passes Lease events that can change an admission
// decision: creation, deletion, and updates that change the state, the
// operation or the generation, or move a failover-hold's expiresAt (and so
// an admission's retryTime). A renewal of the migration mutex moves only
// its expiresAt, which no decision of the controller reads: it is dropped,
// so steady renewals cost the API server no reconcile (a reconcile reads
// the group uncached) and do not queue ahead of a failover. Updates that
// change nothing the controller decides on are dropped.
func leaseDecisionChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldL, ok1 := e.ObjectOld.(*coordinationv1.Lease)
			newL, ok2 := e.ObjectNew.(*coordinationv1.Lease)
			if !ok1 || !ok2 {
				return false
			}
			o, err1 := leasestore.Decode(oldL)
			n, err2 := leasestore.Decode(newL)
			if err1 != nil || err2 != nil {
				return err1 == nil || err2 == nil
			}
			if o.State != n.State || o.Generation != n.Generation || o.OperationID != n.OperationID ||
				o.GroupUID != n.GroupUID || o.Kind != n.Kind {
				return true
			}
			return n.Kind == leases.KindFailoverHold && !o.ExpiresAt.Equal(n.ExpiresAt)
		},
		// A pending tombstone leaves the cache when it is announced (its kind
		// label becomes "tombstone"); that changes no decision. Its creation
		// passes: it is what wakes the controller to announce it.
		DeleteFunc: func(e event.DeleteEvent) bool {
			return e.Object.GetLabels()[leasestore.LabelKind] != leasestore.KindPendingTombstone
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
