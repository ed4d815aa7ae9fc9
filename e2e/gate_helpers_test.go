package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/policy"
)

// playgroundDatabase is the playground's MysqlDatabase.
var playgroundDatabase = client.ObjectKey{Namespace: devenv.PlaygroundNamespace, Name: devenv.DatabaseName}

// waitGated waits until the playground's database is gated (the condition
// True and a pending operation) and returns what it waits on.
func waitGated(t *testing.T, admin client.Client, within time.Duration) *v1.SchemaVerification {
	t.Helper()
	db := &v1.MysqlDatabase{}
	waitFor(t, within, func() bool {
		return admin.Get(context.Background(), playgroundDatabase, db) == nil && db.Status.PendingVerification != nil &&
			meta.IsStatusConditionTrue(db.Status.Conditions, policy.ConditionSchemaVerificationRequired)
	})
	return db.Status.PendingVerification
}

// verifySchema sets the schema-verified annotation to op, as a person
// does, and waits until the operator opened the gate and removed it.
func verifySchema(t *testing.T, admin client.Client, op string) {
	t.Helper()
	ctx := context.Background()
	db := &v1.MysqlDatabase{}
	if err := admin.Get(ctx, playgroundDatabase, db); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(db.DeepCopy())
	metav1.SetMetaDataAnnotation(&db.ObjectMeta, v1.SchemaVerifiedAnnotation, op)
	if err := admin.Patch(ctx, db, patch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() bool {
		_, annotated := db.Annotations[v1.SchemaVerifiedAnnotation]
		return admin.Get(ctx, playgroundDatabase, db) == nil && db.Status.PendingVerification == nil && !annotated &&
			db.Status.LastVerifiedOperationID == op &&
			meta.IsStatusConditionFalse(db.Status.Conditions, policy.ConditionSchemaVerificationRequired)
	})
}

// expectNotGated checks that the playground's database is not gated after
// a run ended. Instead of waiting for a bookkeeping pass, it takes and
// releases a migration lease of a new operation: a grant records any
// unconfirmed DDL of the ended run before it may take the mutex over, so
// the status read after it is final.
func expectNotGated(t *testing.T, p *devenv.Playground, admin client.Client, addr, why string) {
	t.Helper()
	c := deployClient(t, p)
	api := groupAPI(addr)
	op := "gate-probe-" + time.Now().UTC().Format("150405.000000")
	st, grant := c.call(http.MethodPost, api+"/leases", map[string]any{"kind": "migration", "operationId": op, "instance": devenv.DatabaseName, "ttlSeconds": 5})
	if st != http.StatusCreated {
		t.Fatalf("%s, yet a new migration is refused: %d %v", why, st, grant)
	}
	c.call(http.MethodDelete, api+"/leases/migration/"+op, nil, "X-Lease-Token", grant["token"].(string))
	db := &v1.MysqlDatabase{}
	if err := admin.Get(context.Background(), playgroundDatabase, db); err != nil || db.Status.PendingVerification != nil {
		t.Fatalf("%s, yet gated: %+v %v", why, db.Status.PendingVerification, err)
	}
}
