package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/store/leasestore"
	"github.com/shipstream/bloodraven/topology"
	"github.com/shipstream/bloodraven/topology/prober"
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
	// DefaultWorkers is how many groups are reconciled at once. A worker
	// spends most of a reconcile waiting (the API server, the data plane),
	// so it is sized by measurement, not by cores: see docs/failover.md,
	// "Fleet".
	DefaultWorkers = 64
	// PriorityUrgent is the queue priority of a group whose primary is lost,
	// or whose primary is moving, or whose lost site answers again: it is
	// reconciled ahead of every routine reconcile.
	PriorityUrgent = 100
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
	// Prober, when set, is the reconcile's probe (one per reconcile, sites
	// in parallel, sites just seen dead not dialed) and watches every active
	// site in the background; see package topology/prober. Nil: the driver
	// probes.
	Prober *prober.Prober
	// Workers reconcile groups at once; DefaultWorkers when zero.
	Workers int
	// Leading, when set, confirms that this replica still leads right
	// before the driver opens or re-points a site (topology.ConfirmLeading):
	// a deposed leader never acts on the data plane. Nil: unchecked (the
	// tests' single reconciler).
	Leading topology.LeaderCheck
}

// passOutcome is the outcome of one part of a reconcile: when to look again.
type passOutcome struct {
	requeueAfter time.Duration
	// degraded, when set, overrides the probe's degraded reason (a site the
	// controller had to leave fenced).
	degraded string
}

func (s *passOutcome) after(d time.Duration) {
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
//  1. the safety paths (probe, policy.DecideSafety, act) run first, from
//     their own inputs; they never read a deployment lease;
//  2. lease bookkeeping runs next as its own step; its errors are logged
//     and retried, and never return early;
//  3. the planned operations run behind the admission gate;
//  4. the observation is written to status, once, when it changed; also
//     when step 3 failed, whose error is returned after the write.
//
// A group being deleted keeps step 1 until it is gone: a finalizer that
// cannot complete (a denied Lease delete, another controller's finalizer)
// must not leave it without probing, emergency failover and fencing. Its
// finalizer takes the place of step 2, and step 3 stops: no grant is taken
// while the group is being deleted.
func (r *GroupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ctx = topology.WithLeaderCheck(ctx, r.Leading)
	g := &bloodravenv1alpha1.MysqlFailoverGroup{}
	if err := r.API.Get(ctx, req.NamespacedName, g); err != nil {
		if apierrors.IsNotFound(err) && r.Prober != nil {
			r.Prober.Forget(req.NamespacedName)
		}
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
	var st passOutcome
	st.after(r.probeInterval())

	// 1. Safety paths.
	sites, err := r.probe(ctx, g)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("probe: %w", err)
	}
	acted, err := r.reconcileSafety(ctx, g, sites, &st)
	// 2. Lease bookkeeping (the finalizer, for a group being deleted): after
	// step 1, and never in its way. A pass whose step 1 acted requeues at
	// once and leaves the history (runs, gates) to that next pass.
	if deleting {
		err = errors.Join(err, r.finalize(ctx, g))
	} else {
		r.reconcileLeases(ctx, g, &st, leasePass{history: !acted})
	}
	if err != nil {
		// A loss marked or cleared in step 1 is persisted even so: a
		// finalizer that keeps failing must not keep the budget from
		// starting.
		if !equality.Semantic.DeepEqual(persisted.PrimaryLostAt, g.Status.PrimaryLostAt) {
			if werr := r.writeStatus(ctx, g); werr != nil {
				err = errors.Join(err, werr)
			}
		}
		return ctrl.Result{}, err
	}
	if acted { // the data plane changed: probe again before anything else
		r.invalidate(g)
		//lint:ignore SA1019 Requeue (with the rate limiter's backoff) is "probe again now"; no fixed RequeueAfter fits
		return ctrl.Result{Requeue: true, Priority: urgency(g, sites)}, nil
	}
	// 3. Planned operations. An operation step that fails does not return
	// here: its error is returned after the observation is written (step
	// 4), so a planned operation that keeps failing never keeps the health,
	// a lost primary (and with it the detection budget) or the stability
	// from being recorded.
	var opErr error
	if !deleting {
		before := g.Status.DeepCopy()
		opErr = r.reconcileOperations(ctx, g, sites, &st)
		// An operation that acted on the data plane changed its status: the
		// observation needs a probe of its own. Otherwise the one probe of
		// this reconcile stands.
		if !equality.Semantic.DeepEqual(before, &g.Status) {
			r.invalidate(g)
			if sites, err = r.probe(ctx, g); err != nil {
				// No probe to observe: as after a failed step 1 or 2, a
				// loss marked or cleared in step 1 is persisted even so.
				err = errors.Join(opErr, fmt.Errorf("probe: %w", err))
				if !equality.Semantic.DeepEqual(persisted.PrimaryLostAt, g.Status.PrimaryLostAt) {
					if werr := r.writeStatus(ctx, g); werr != nil {
						err = errors.Join(err, werr)
					}
				}
				return ctrl.Result{}, err
			}
		}
	}
	// 4. Observation, after a failed operation step too.
	r.observe(g, sites)
	if st.degraded != "" {
		g.Status.Health.DegradedReason = st.degraded
		setCondition(g, bloodravenv1alpha1.ConditionDegraded, true, "SiteFenced", st.degraded, r.now())
	}
	if !equality.Semantic.DeepEqual(persisted, &g.Status) {
		if err := r.writeStatus(ctx, g); err != nil {
			if deleting { // its finalizer may have been the last
				err = client.IgnoreNotFound(err)
			}
			return ctrl.Result{}, errors.Join(opErr, err)
		}
	}
	if !deleting {
		r.Metrics.observeGroup(g)
	}
	if opErr != nil {
		return ctrl.Result{}, opErr
	}
	return ctrl.Result{RequeueAfter: st.requeueAfter, Priority: urgency(g, sites)}, nil
}

// probe is the reconcile's probe: the prober's when there is one.
func (r *GroupReconciler) probe(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup) ([]topology.SiteState, error) {
	if r.Prober != nil {
		return r.Prober.Probe(ctx, g)
	}
	return r.driver().Probe(ctx, g)
}

// invalidate tells the prober that what it saw of g no longer stands in for
// a probe: the controller acted on g's data plane.
func (r *GroupReconciler) invalidate(g *bloodravenv1alpha1.MysqlFailoverGroup) {
	if r.Prober != nil {
		r.Prober.Invalidate(g)
	}
}

// urgency is the queue priority of the group's next reconcile: urgent while
// its primary is lost or unreachable, or a transition is under way; routine
// (0) otherwise, which also ends an urgency the queue remembered.
func urgency(g *bloodravenv1alpha1.MysqlFailoverGroup, sites []topology.SiteState) *int {
	p := 0
	if g.Status.PrimaryLostAt != nil || g.Status.Transition != nil {
		p = PriorityUrgent
	}
	for _, s := range sites {
		if s.Name == g.Status.ActiveSite && !s.Reachable {
			p = PriorityUrgent
		}
	}
	return &p
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
func (r *GroupReconciler) writeStatus(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup) error {
	g.Status.ObservedGeneration = g.Generation
	// A request that has run (the write that completes it included) or is
	// gone takes its deferral budget with it: holds are granted again.
	pruneDeferralBudgets(g)
	if err := r.Client.Status().Update(ctx, g); err != nil {
		r.Metrics.statusWriteFailed(g, err)
		return fmt.Errorf("write status: %w", err)
	}
	return nil
}

func (r *GroupReconciler) now() metav1.Time { return metav1.NewTime(r.Clock.Now()) }

// observe writes health and conditions from a probe.
func (r *GroupReconciler) observe(g *bloodravenv1alpha1.MysqlFailoverGroup, sites []topology.SiteState) {
	h, conds := policy.ObserveHealth(g.Status.ActiveSite, sites)
	g.Status.Health = h
	now := r.now()
	for _, c := range conds {
		setCondition(g, c.Type, c.True, c.Reason, c.Message, now)
	}
	held, reason := policy.AutomaticFailoverHeld(g.Status.PlannedFailover)
	setCondition(g, bloodravenv1alpha1.ConditionAutomaticFailoverHeld, held, reason, "", now)
}

func setCondition(g *bloodravenv1alpha1.MysqlFailoverGroup, typ string, val bool, reason, msg string, now metav1.Time) {
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
func (r *GroupReconciler) finalize(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup) error {
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
	if r.Prober != nil {
		r.Prober.Forget(client.ObjectKeyFromObject(g))
	}
	return nil
}

// SetupWithManager registers the controller: groups (but not their
// status-only updates, the controller's own writes), the deployment Leases
// they own, filtered to changes that matter to admission, and, with a
// Prober, the prober's news, queued ahead of routine reconciles. The prober
// runs under the manager, on the leader only.
func (r *GroupReconciler) SetupWithManager(mgr ctrl.Manager) error {
	workers := r.Workers
	if workers <= 0 {
		workers = DefaultWorkers
	}
	// The bookkeeping reads DeployRuns from the cache: their informer starts
	// with the manager, whose start fails (missing CRD or RBAC) instead of
	// a reconcile waiting for an informer that never syncs.
	if _, err := mgr.GetCache().GetInformer(context.Background(), &bloodravenv1alpha1.DeployRun{}); err != nil {
		return fmt.Errorf("DeployRun informer: %w", err)
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&bloodravenv1alpha1.MysqlFailoverGroup{}, builder.WithPredicates(notStatusOnly())).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(leaseOwner),
			builder.WithPredicates(leaseDecisionChanged())).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers})
	if r.Prober != nil {
		var mu sync.Mutex
		var queue workqueue.TypedRateLimitingInterface[reconcile.Request]
		r.Prober.Notify = func(nn types.NamespacedName) {
			mu.Lock()
			q := queue
			mu.Unlock()
			if q != nil {
				enqueueUrgent(q, reconcile.Request{NamespacedName: nn})
			}
		}
		b = b.WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			mu.Lock()
			queue = q
			mu.Unlock()
			return nil
		}))
		if err := mgr.Add(r.Prober); err != nil {
			return fmt.Errorf("prober: %w", err)
		}
	}
	return b.Complete(r)
}

// enqueueUrgent queues req ahead of routine reconciles.
func enqueueUrgent(q workqueue.TypedRateLimitingInterface[reconcile.Request], req reconcile.Request) {
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
		p := PriorityUrgent
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: &p}, req)
		return
	}
	q.Add(req)
}

// notStatusOnly drops group updates that change nothing but the status and
// the resourceVersion: the controller's own status writes, which would
// otherwise queue the group again behind everyone else. A change of spec
// (generation), labels, annotations (the revoke annotation), finalizers or
// the deletion timestamp passes. The controller requeues every group at
// least every probe interval, so a status written by someone else is read
// within one.
func notStatusOnly() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld, e.ObjectNew
			if o == nil || n == nil {
				return true
			}
			return o.GetGeneration() != n.GetGeneration() ||
				!equality.Semantic.DeepEqual(o.GetLabels(), n.GetLabels()) ||
				!equality.Semantic.DeepEqual(o.GetAnnotations(), n.GetAnnotations()) ||
				!equality.Semantic.DeepEqual(o.GetFinalizers(), n.GetFinalizers()) ||
				!equality.Semantic.DeepEqual(o.GetDeletionTimestamp(), n.GetDeletionTimestamp())
		},
	}
}

// leaseOwner maps a deployment Lease to its group.
func leaseOwner(_ context.Context, obj client.Object) []reconcile.Request {
	if nn, ok := leasestore.OwnerGroup(obj); ok {
		return []reconcile.Request{{NamespacedName: nn}}
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
			if n.Kind == leases.KindMigration {
				// The DDL boundary and a reported outcome are what the
				// operation's DeployRun records.
				return o.Phase != n.Phase || o.Outcome != n.Outcome
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

// OwnClients returns clients for the controller with a rate limiter of its
// own (qps, burst), over the manager's config, scheme, mapper and cache:
// writes and cached reads (the first), and uncached reads (the second). The
// deployment API keeps the manager's client, so a fleet failing over does
// not queue renewals behind status writes on one client-side limiter, nor
// the reverse.
func OwnClients(mgr ctrl.Manager, qps float32, burst int) (client.Client, client.Reader, error) {
	cfg := rest.CopyConfig(mgr.GetConfig())
	cfg.QPS, cfg.Burst, cfg.RateLimiter = qps, burst, nil
	opts := client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()}
	api, err := client.New(cfg, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("controller client: %w", err)
	}
	opts.Cache = &client.CacheOptions{Reader: mgr.GetCache()}
	c, err := client.New(cfg, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("controller client: %w", err)
	}
	return c, api, nil
}
