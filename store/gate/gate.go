package gate

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/policy"
	"github.com/shipstream/bloodraven/store"
)

// Close records rec's unconfirmed DDL on its instance's MysqlDatabase in
// namespace: status.pendingVerification and the condition
// SchemaVerificationRequired. It reads the database from api (uncached)
// and writes its status with w. A database that is gone, or already
// accounts for rec (policy.GateRecorded), is left alone. closed reports
// whether this call wrote the gate.
func Close(ctx context.Context, api client.Reader, w client.Client, namespace string, rec *leases.Record, now time.Time) (closed bool, err error) {
	err = store.Retry(func(bool) error {
		closed = false
		db := &bloodravenv1alpha1.MysqlDatabase{}
		if err := api.Get(ctx, client.ObjectKey{Namespace: namespace, Name: rec.Instance}, db); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("read MysqlDatabase %s/%s to close its gate: %w", namespace, rec.Instance, err)
		}
		next, changed := policy.CloseGate(db.Status, rec, db.Generation, now)
		if !changed {
			return nil
		}
		db.Status = next
		if err := w.Status().Update(ctx, db); err != nil {
			return fmt.Errorf("close the gate of MysqlDatabase %s/%s for %s: %w", namespace, rec.Instance, rec.OperationID, err)
		}
		closed = true
		return nil
	})
	return closed, err
}

// View is what a migration grant for instance needs of the gate, given the
// group's migration record m (nil when none): read from api, after m was.
func View(ctx context.Context, api client.Reader, namespace, instance string, m *leases.Record, now time.Time) (policy.VerificationView, error) {
	var out policy.VerificationView
	read := func(name string) (*bloodravenv1alpha1.MysqlDatabase, error) {
		db := &bloodravenv1alpha1.MysqlDatabase{}
		if err := api.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, db); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("read MysqlDatabase %s/%s for its gate: %w", namespace, name, err)
		}
		return db, nil
	}
	db, err := read(instance)
	if err != nil {
		return out, err
	}
	if db != nil {
		if op, gen, ok := policy.VerificationPending(&db.Status); ok {
			out.Pending = &leases.Record{Kind: leases.KindMigration, OperationID: op, Instance: instance, Generation: gen}
		}
	}
	if m.UnconfirmedDDL(now) {
		other := db
		if m.Instance != instance {
			if other, err = read(m.Instance); err != nil {
				return out, err
			}
		}
		out.MigrationRecorded = other == nil || policy.GateRecorded(&other.Status, m)
	}
	return out, nil
}
