package e2e

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/devenv"
	"github.com/shipstream/bloodraven/policy"
)

// playgroundDatabase is the playground's MysqlDatabase.
var playgroundDatabase = client.ObjectKey{Namespace: devenv.PlaygroundNamespace, Name: devenv.DatabaseName}

// waitGated waits until the playground's database is gated (the condition
// True and a pending operation) and returns what it waits on.
func waitGated(t *testing.T, admin client.Client, within time.Duration) *bloodravenv1alpha1.SchemaVerification {
	t.Helper()
	db := &bloodravenv1alpha1.MysqlDatabase{}
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
	db := &bloodravenv1alpha1.MysqlDatabase{}
	if err := admin.Get(ctx, playgroundDatabase, db); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(db.DeepCopy())
	metav1.SetMetaDataAnnotation(&db.ObjectMeta, bloodravenv1alpha1.SchemaVerifiedAnnotation, op)
	if err := admin.Patch(ctx, db, patch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() bool {
		_, annotated := db.Annotations[bloodravenv1alpha1.SchemaVerifiedAnnotation]
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
	db := &bloodravenv1alpha1.MysqlDatabase{}
	if err := admin.Get(context.Background(), playgroundDatabase, db); err != nil || db.Status.PendingVerification != nil {
		t.Fatalf("%s, yet gated: %+v %v", why, db.Status.PendingVerification, err)
	}
}

// releaseHolder is a TLS reverse proxy in front of the playground's
// deployment API that holds every release of a migration mutex (a DELETE
// of .../leases/migration/...) until Let is called: it places a move
// between a run's last renewal and its release. Held is closed when the
// first such release arrives. A held request whose client gave up is
// dropped, never forwarded.
type releaseHolder struct {
	URL, CA string // the proxy's base URL, and the PEM file of its certificate
	Held    chan struct{}
	let     chan struct{}
	held    sync.Once
	lets    sync.Once
}

func startReleaseHolder(t *testing.T, p *devenv.Playground, cfg devenv.Config) *releaseHolder {
	t.Helper()
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "https", Host: cfg.TLSAddr})
	rp.Transport = &http.Transport{TLSClientConfig: playgroundTLS(t, p)}
	h := &releaseHolder{Held: make(chan struct{}), let: make(chan struct{})}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete && strings.Contains(r.URL.Path, "/leases/migration/") {
			h.held.Do(func() { close(h.Held) })
			select {
			case <-h.let:
			case <-r.Context().Done():
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	t.Cleanup(h.Let) // before Close, which waits for held requests
	h.URL = srv.URL
	h.CA = filepath.Join(t.TempDir(), "proxy-ca.pem")
	if err := os.WriteFile(h.CA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return h
}

// Let forwards the held releases, and every later one.
func (h *releaseHolder) Let() { h.lets.Do(func() { close(h.let) }) }
