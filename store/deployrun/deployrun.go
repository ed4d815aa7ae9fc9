package deployrun

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/store"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// Labels on DeployRun objects.
const (
	LabelGroup    = leasestore.LabelGroup
	LabelInstance = "bloodraven.shipstream.io/instance"
)

// Name is the name of the DeployRun of the tenure of operationID for
// instance in g that began at tenure: the group's name and a digest of its
// UID, the instance, the operation ID and the tenure's start (operation IDs
// need not be valid object names; one pipeline run may migrate several
// instances under one operation ID; a re-run under the same operation ID is
// a new tenure with a run of its own, which never rewrites the earlier
// run's outcome; and a group re-created under the same name starts a
// history of its own, even where no garbage collector removed the old one).
// A zero tenure (a record from before tenures were recorded) names the run
// as releases before 0.3 did.
func Name(g *bloodravenv1alpha1.MysqlFailoverGroup, instance, operationID string, tenure time.Time) string {
	key := string(g.UID) + "/" + instance + "/" + operationID
	if !tenure.IsZero() {
		key += "/" + strconv.FormatInt(tenure.UnixMicro(), 10)
	}
	sum := sha256.Sum256([]byte(key))
	suffix := "-" + hex.EncodeToString(sum[:6])
	if len(g.Name)+len(suffix) <= 253 {
		return g.Name + suffix
	}
	n := sha256.Sum256([]byte(g.Name))
	return "run-" + hex.EncodeToString(n[:10]) + suffix
}

// IsRace tells whether err is only a lost race (a conflict, or a create
// that found the run written meanwhile): deciding again on a fresh read
// settles it.
func IsRace(err error) bool { return store.Retryable(err) }

// Sync makes the DeployRun of rec's operation in g match rec at now
// (policy.RunStatus): it writes the run's status when it differs, and
// creates a missing run when create says so (only for a record of g's
// incarnation). read is the reader the decision is made on (the cache or
// the API server); a write that lost a race returns an error for which
// IsRace holds.
func Sync(ctx context.Context, read client.Reader, w client.Client, g *bloodravenv1alpha1.MysqlFailoverGroup, rec *leases.Record, now time.Time, create bool) error {
	if !runsOf(g, rec) {
		return nil
	}
	run := &bloodravenv1alpha1.DeployRun{}
	err := read.Get(ctx, client.ObjectKey{Namespace: g.Namespace, Name: Name(g, rec.Instance, rec.OperationID, rec.TenureStart())}, run)
	switch {
	case apierrors.IsNotFound(err):
		if !create {
			return nil
		}
		if run, err = createRun(ctx, w, g, rec); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("read DeployRun of %s: %w", rec.OperationID, err)
	}
	if run.Spec.OperationID != rec.OperationID || run.Spec.Instance != rec.Instance {
		return nil // not this operation's
	}
	return writeStatus(ctx, w, run, policy.RunStatus(run.Status, rec, now), now)
}

// SyncFresh is Sync on fresh reads (read must be uncached), deciding again
// after a lost race (store.Retry): for a record whose end nobody
// can read once it is replaced.
func SyncFresh(ctx context.Context, read client.Reader, w client.Client, g *bloodravenv1alpha1.MysqlFailoverGroup, rec *leases.Record, now time.Time) error {
	return store.Retry(func(bool) error { return Sync(ctx, read, w, g, rec, now, true) })
}

// Begin writes the run of a grant that began a tenure (a create or a
// take-over): it creates the run without reading first, since such a run
// is almost always new, and falls back to SyncFresh when it exists (the
// same operation taking the mutex again).
func Begin(ctx context.Context, read client.Reader, w client.Client, g *bloodravenv1alpha1.MysqlFailoverGroup, rec *leases.Record, now time.Time) error {
	if !runsOf(g, rec) {
		return nil
	}
	run, err := createRun(ctx, w, g, rec)
	if apierrors.IsAlreadyExists(err) {
		return SyncFresh(ctx, read, w, g, rec, now)
	}
	if err != nil {
		return err
	}
	if err = writeStatus(ctx, w, run, policy.RunStatus(run.Status, rec, now), now); IsRace(err) {
		return SyncFresh(ctx, read, w, g, rec, now)
	}
	return err
}

// Report records outcome, reported by the client of instance's operation
// after its record was replaced, on its ended run that carries no report
// yet (policy.RunReported) at now. It reads from read, which must be
// uncached.
func Report(ctx context.Context, read client.Reader, w client.Client, g *bloodravenv1alpha1.MysqlFailoverGroup, instance, operationID string,
	tenure time.Time, outcome leases.Outcome, now time.Time) error {
	return store.Retry(func(bool) error {
		run := &bloodravenv1alpha1.DeployRun{}
		if err := read.Get(ctx, client.ObjectKey{Namespace: g.Namespace, Name: Name(g, instance, operationID, tenure)}, run); err != nil {
			return client.IgnoreNotFound(err)
		}
		next, ok := policy.RunReported(run.Status, outcome)
		if !ok {
			return nil
		}
		return writeStatus(ctx, w, run, next, now)
	})
}

// Lost records each of runs displaced by current, the group's migration
// record (policy.RunDisplaced), as ended in an unknown way
// (policy.RunLost), at now.
func Lost(ctx context.Context, w client.Client, runs []bloodravenv1alpha1.DeployRun, current *leases.Record, now time.Time) error {
	for i := range runs {
		r := &runs[i]
		if !policy.RunDisplaced(r.Spec.OperationID, r.Status, current) {
			continue
		}
		if err := writeStatus(ctx, w, r, policy.RunLost(r.Status), now); err != nil && !IsRace(err) {
			return err
		}
	}
	return nil
}

// Prune deletes the runs policy.RunsToPrune names for g's history, each
// with the resourceVersion it was read at.
func Prune(ctx context.Context, w client.Client, g *bloodravenv1alpha1.MysqlFailoverGroup, runs []bloodravenv1alpha1.DeployRun) error {
	views := make([]policy.RunView, 0, len(runs))
	byName := map[string]*bloodravenv1alpha1.DeployRun{}
	for i := range runs {
		r := &runs[i]
		var start time.Time
		if r.Status.StartTime != nil {
			start = r.Status.StartTime.Time
		} else {
			start = r.CreationTimestamp.Time
		}
		views = append(views, policy.RunView{Name: r.Name, Instance: r.Spec.Instance, Start: start,
			Running: r.Status.Outcome == bloodravenv1alpha1.DeployRunRunning || r.Status.Outcome == ""})
		byName[r.Name] = r
	}
	for _, name := range policy.RunsToPrune(views, History(g)) {
		r := byName[name]
		err := w.Delete(ctx, r, client.Preconditions{UID: &r.UID, ResourceVersion: &r.ResourceVersion})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("prune DeployRun %s: %w", name, err)
		}
	}
	return nil
}

// History is how many runs g keeps per instance.
func History(g *bloodravenv1alpha1.MysqlFailoverGroup) int {
	if g.Spec.DeployRunHistory > 0 {
		return int(g.Spec.DeployRunHistory)
	}
	return 20
}

// List returns g's DeployRuns (of this incarnation) as read reads them.
func List(ctx context.Context, read client.Reader, g *bloodravenv1alpha1.MysqlFailoverGroup) ([]bloodravenv1alpha1.DeployRun, error) {
	list := &bloodravenv1alpha1.DeployRunList{}
	if err := read.List(ctx, list, client.InNamespace(g.Namespace),
		client.MatchingLabels{LabelGroup: leases.LabelValue(g.Name)}); err != nil {
		return nil, fmt.Errorf("list DeployRuns of %s/%s: %w", g.Namespace, g.Name, err)
	}
	out := list.Items[:0]
	for _, r := range list.Items {
		if r.Spec.GroupRef.Name == g.Name && ownedBy(&r, g) {
			out = append(out, r)
		}
	}
	return out, nil
}

func ownedBy(r *bloodravenv1alpha1.DeployRun, g *bloodravenv1alpha1.MysqlFailoverGroup) bool {
	for _, o := range r.OwnerReferences {
		if o.UID == g.UID {
			return true
		}
	}
	return false
}

func createRun(ctx context.Context, w client.Client, g *bloodravenv1alpha1.MysqlFailoverGroup, rec *leases.Record) (*bloodravenv1alpha1.DeployRun, error) {
	run := &bloodravenv1alpha1.DeployRun{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: g.Namespace, Name: Name(g, rec.Instance, rec.OperationID, rec.TenureStart()),
			Labels: map[string]string{
				leasestore.LabelManagedBy: leasestore.ManagedByValue,
				LabelGroup:                leases.LabelValue(g.Name),
				LabelInstance:             leases.LabelValue(rec.Instance),
			},
			OwnerReferences: []metav1.OwnerReference{leasestore.GroupOwner(g)},
		},
		Spec: bloodravenv1alpha1.DeployRunSpec{GroupRef: bloodravenv1alpha1.GroupReference{Name: g.Name}, Instance: rec.Instance,
			OperationID: rec.OperationID, Caller: rec.Identity, GrantGeneration: rec.Generation},
	}
	if err := w.Create(ctx, run); err != nil {
		return nil, fmt.Errorf("create DeployRun of %s: %w", rec.OperationID, err) // AlreadyExists: IsRace
	}
	return run, nil
}

// writeStatus writes next as run's status, with the conditions of its
// outcome at now (policy.RunConditions), with the resourceVersion run was
// read at; a conflict is returned (IsRace), a run pruned meanwhile is left
// alone. Nothing is written when nothing changed.
func writeStatus(ctx context.Context, w client.Client, run *bloodravenv1alpha1.DeployRun, next bloodravenv1alpha1.DeployRunStatus, now time.Time) error {
	next.Conditions = run.Status.Conditions
	next = policy.RunConditions(next, run.Generation, now)
	if equality.Semantic.DeepEqual(run.Status, next) {
		return nil
	}
	run = run.DeepCopy()
	run.Status = next
	if err := w.Status().Update(ctx, run); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("write DeployRun %s status: %w", run.Name, err)
	}
	return nil
}

// runsOf tells whether rec leaves a DeployRun in g: a migration record of
// g's incarnation.
func runsOf(g *bloodravenv1alpha1.MysqlFailoverGroup, rec *leases.Record) bool {
	return rec != nil && rec.Kind == leases.KindMigration && rec.BelongsTo(string(g.UID))
}
