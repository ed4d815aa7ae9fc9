package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/policy"
)

// Condition types of a MysqlDatabase.
const (
	// DatabaseGroupFound: spec.groupRef names a MysqlFailoverGroup that
	// exists in the database's namespace.
	DatabaseGroupFound = "GroupFound"
	// DatabaseDeploymentClients: spec.deploymentClients lists at least one
	// ServiceAccount; False means the deployment API refuses every caller
	// for this database.
	DatabaseDeploymentClients = "DeploymentClients"
)

// DatabaseReconciler writes a MysqlDatabase's status: whether its group
// exists, and whether anyone may coordinate deployments for it. It decides
// nothing else; authorization is read from the spec on every API request.
// It also runs the database's side of the schema-verification gate: it
// announces a gate closed (by the deployment API or the group controller)
// with Event SchemaVerificationRequired, once, and opens it on the
// schema-verified annotation naming the pending operation
// (policy.OpenGate): the condition turns False, the annotation is removed,
// Event SchemaVerified. Each Event is emitted only by the status write
// that succeeded, so never twice.
//
// It reads the database and its group from Client's cache: its status is
// advisory (the deployment API reads a database's spec on every request and
// decides nothing from these conditions), a write from a stale read fails
// on its resourceVersion and is retried, and a group created or deleted
// after a read queues its databases again. So a restart over 10,000
// databases whose status is current costs the API server nothing.
type DatabaseReconciler struct {
	Client client.Client
	Clock  clock.PassiveClock
	// Recorder emits the gate's Events; nil emits none.
	Recorder record.EventRecorder
	// Workers reconcile databases at once (DefaultDatabaseWorkers when
	// zero).
	Workers int
	// GroupIndex, when set, is a cache index of MysqlDatabases by
	// spec.groupRef.name (deployapi.GroupRefField): a group's databases are
	// found by it instead of a scan of the namespace.
	GroupIndex string
}

// Reconcile writes the database's conditions when they changed.
func (r *DatabaseReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	db := &bloodravenv1alpha1.MysqlDatabase{}
	if err := r.Client.Get(ctx, req.NamespacedName, db); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	persisted := db.Status.DeepCopy()
	now := metav1.NewTime(r.Clock.Now())
	set := func(typ string, ok bool, yes, no, msg string) {
		c := metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: no, Message: msg, ObservedGeneration: db.Generation, LastTransitionTime: now}
		if ok {
			c.Status, c.Reason = metav1.ConditionTrue, yes
		}
		if old := meta.FindStatusCondition(db.Status.Conditions, typ); old != nil && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		meta.SetStatusCondition(&db.Status.Conditions, c)
	}
	g := &bloodravenv1alpha1.MysqlFailoverGroup{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: db.Namespace, Name: db.Spec.GroupRef.Name}, g)
	switch {
	case apierrors.IsNotFound(err):
		set(DatabaseGroupFound, false, "", "GroupNotFound", fmt.Sprintf("no MysqlFailoverGroup %q in namespace %s", db.Spec.GroupRef.Name, db.Namespace))
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("group of database: %w", err)
	default:
		set(DatabaseGroupFound, true, "Found", "", fmt.Sprintf("MysqlFailoverGroup %s", g.Name))
	}
	n := len(db.Spec.DeploymentClients)
	set(DatabaseDeploymentClients, n > 0, "Listed", "NoneListed",
		map[bool]string{true: fmt.Sprintf("%d ServiceAccount(s) may coordinate deployments", n), false: "no ServiceAccount may call the deployment API for this database"}[n > 0])
	db.Status.ObservedGeneration = db.Generation

	verifiedAs, annotated := db.Annotations[bloodravenv1alpha1.SchemaVerifiedAnnotation]
	verification := policy.OpenGate(db.Status, verifiedAs, annotated, db.Generation, now.Time)
	db.Status = verification.Status
	var announce *bloodravenv1alpha1.SchemaVerification
	if p := db.Status.PendingVerification; p != nil && !p.Announced {
		p.Announced = true
		announce = p
	}
	if !equality.Semantic.DeepEqual(persisted, &db.Status) {
		if err := r.Client.Status().Update(ctx, db); err != nil {
			return ctrl.Result{}, fmt.Errorf("write database status: %w", err)
		}
		if announce != nil {
			EventSchemaVerificationRequired.emit(r.Recorder, db, announce.OperationID, announce.TopologyGeneration, announce.Ended,
				bloodravenv1alpha1.SchemaVerifiedAnnotation, announce.OperationID)
		}
		if verification.Opened {
			EventSchemaVerified.emit(r.Recorder, db, verifiedAs)
		}
	}
	if verification.RemoveAnnotation {
		patch := client.MergeFrom(db.DeepCopy())
		delete(db.Annotations, bloodravenv1alpha1.SchemaVerifiedAnnotation)
		if err := r.Client.Patch(ctx, db, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("remove %s: %w", bloodravenv1alpha1.SchemaVerifiedAnnotation, err)
		}
	}
	return ctrl.Result{}, nil
}

// DefaultDatabaseWorkers is how many databases are reconciled at once: a
// reconcile is two cache reads and at most one status write, so a few
// workers keep up with a fleet's creation without competing with the group
// controller's 64.
const DefaultDatabaseWorkers = 4

// SetupWithManager registers the controller: databases, and the groups they
// name (a group created or deleted changes GroupFound).
func (r *DatabaseReconciler) SetupWithManager(mgr ctrl.Manager) error {
	workers := r.Workers
	if workers <= 0 {
		workers = DefaultDatabaseWorkers
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&bloodravenv1alpha1.MysqlDatabase{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Watches(&bloodravenv1alpha1.MysqlFailoverGroup{}, handler.EnqueueRequestsFromMapFunc(r.databasesOf(mgr.GetClient())),
			builder.WithPredicates(groupExistence)).
		Complete(r)
}

// groupExistence passes a group's creation and deletion, all a database's
// status depends on, and drops its updates: a failing-over fleet writes
// every group's status several times, and each write would otherwise
// queue every database of the group again.
var groupExistence = predicate.Funcs{
	UpdateFunc: func(event.UpdateEvent) bool { return false },
}

// databasesOf maps a group to the databases in its namespace that name it.
func (r *DatabaseReconciler) databasesOf(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		opts := []client.ListOption{client.InNamespace(obj.GetNamespace())}
		if r.GroupIndex != "" {
			opts = append(opts, client.MatchingFields{r.GroupIndex: obj.GetName()})
		}
		var list bloodravenv1alpha1.MysqlDatabaseList
		if err := c.List(ctx, &list, opts...); err != nil {
			return nil
		}
		var out []reconcile.Request
		for _, db := range list.Items {
			if db.Spec.GroupRef.Name == obj.GetName() {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&db)})
			}
		}
		return out
	}
}
