package deployapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// Issue 21, item 1: authority comes only from deploymentClients of the
// namespace that holds the group. Each test names the defect it shows.

// withNamespace adds ?namespace=ns to path.
func withNamespace(path, ns string) string {
	return path + "?namespace=" + url.QueryEscape(ns)
}

// A MysqlDatabase in another tenant's namespace, naming the victim's group
// and client while that namespace has no group of the name, authorizes
// nothing and makes nothing ambiguous: every route answers as if it did
// not exist. (At b60db83 every route answered 403.)
func TestADatabaseWhoseNamespaceLacksTheGroupChangesNothing(t *testing.T) {
	f := newFixture(t)
	evil := env.Namespace(t)
	f.createDatabase(evil, "counter-app", "playground", bloodravenv1alpha1.DeploymentClient{Namespace: f.clientNS, ServiceAccount: "deploy"})

	if r := f.do(http.MethodGet, groupPath, f.token, nil); r.status != http.StatusOK || r.str("namespace") != f.groupNS {
		t.Fatalf("GET group: %d %s", r.status, r.raw)
	}
	g := f.grant("migration", "op-1", http.StatusCreated)
	if g.str("namespace") != f.groupNS {
		t.Fatalf("the grant names namespace %q, want %q: %s", g.str("namespace"), f.groupNS, g.raw)
	}
	r := f.do(http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": g.str("token")})
	if r.status != http.StatusOK || r.str("namespace") != f.groupNS {
		t.Fatalf("renewal: %d %s", r.status, r.raw)
	}
	if r := f.do(http.MethodGet, leasePath("migration", "op-1"), f.token, nil, "X-Lease-Token", g.str("token")); r.status != http.StatusOK || r.str("namespace") != f.groupNS {
		t.Fatalf("lease GET: %d %s", r.status, r.raw)
	}
	if r := f.do(http.MethodDelete, leasePath("migration", "op-1"), f.token, nil, "X-Lease-Token", g.str("token")); r.status != http.StatusNoContent {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}
}

// A second namespace with a group of the same name and a database listing
// the caller is a real ambiguity: without ?namespace= the group routes
// answer the uniform 403; with it, the named namespace settles it. A
// namespace where the caller is not authorized, or that is malformed or
// given twice, is refused as the contract says.
func TestTheNamespaceParameterSettlesARealAmbiguity(t *testing.T) {
	f := newFixture(t)
	other := env.Namespace(t)
	f.createGroup(other, "playground", 7)
	f.createDatabase(other, "counter-app", "playground", bloodravenv1alpha1.DeploymentClient{Namespace: f.clientNS, ServiceAccount: "deploy"})
	nowhere := env.Namespace(t)

	expectError(t, f.do(http.MethodGet, groupPath, f.token, nil), http.StatusForbidden, "forbidden")
	expectError(t, f.do(http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", "op-1", 30)), http.StatusForbidden, "forbidden")

	for ns, gen := range map[string]float64{f.groupNS: 1, other: 7} {
		r := f.do(http.MethodGet, withNamespace(groupPath, ns), f.token, nil)
		if r.status != http.StatusOK || r.str("namespace") != ns || r.num("topologyGeneration") != gen {
			t.Fatalf("GET ?namespace=%s: %d %s", ns, r.status, r.raw)
		}
	}
	g := f.do(http.MethodPost, withNamespace(groupPath+"/leases", f.groupNS), f.token, grantBody("migration", "op-1", 30))
	if g.status != http.StatusCreated || g.str("namespace") != f.groupNS {
		t.Fatalf("grant ?namespace=%s: %d %s", f.groupNS, g.status, g.raw)
	}
	if r := f.do(http.MethodPut, withNamespace(leasePath("migration", "op-1"), f.groupNS), f.token, map[string]any{"token": g.str("token")}); r.status != http.StatusOK {
		t.Fatalf("renewal ?namespace=%s: %d %s", f.groupNS, r.status, r.raw)
	}
	// The lease in the other namespace is not the caller's: the parameter
	// confines the renewal to it, and there the lease does not exist.
	expectError(t, f.do(http.MethodPut, withNamespace(leasePath("migration", "op-1"), other), f.token, map[string]any{"token": g.str("token")}), http.StatusNotFound, "not_found")

	expectError(t, f.do(http.MethodGet, withNamespace(groupPath, nowhere), f.token, nil), http.StatusForbidden, "forbidden")
	expectError(t, f.do(http.MethodGet, withNamespace(groupPath, "Not_A_Namespace"), f.token, nil), http.StatusBadRequest, "bad_request")
	expectError(t, f.do(http.MethodGet, groupPath+"?namespace="+f.groupNS+"&namespace="+other, f.token, nil), http.StatusBadRequest, "bad_request")
}

// The lease routes are settled by the lease itself: once another tenant
// makes the group name ambiguous, the holder's renewal, lease GET and
// release still find its own namespace by its token, without ?namespace=.
// (At b60db83 they answered 403.)
func TestLeaseRoutesAreSettledByTheLease(t *testing.T) {
	f := newFixture(t)
	g := f.grant("migration", "op-1", http.StatusCreated)
	h := f.grant("failover-hold", "op-1", http.StatusCreated)

	other := env.Namespace(t)
	f.createGroup(other, "playground", 1)
	f.createDatabase(other, "counter-app", "playground", bloodravenv1alpha1.DeploymentClient{Namespace: f.clientNS, ServiceAccount: "deploy"})
	expectError(t, f.do(http.MethodGet, groupPath, f.token, nil), http.StatusForbidden, "forbidden") // the ambiguity is real

	for kind, tok := range map[string]string{"migration": g.str("token"), "failover-hold": h.str("token")} {
		r := f.do(http.MethodPut, leasePath(kind, "op-1"), f.token, map[string]any{"token": tok})
		if r.status != http.StatusOK || r.str("namespace") != f.groupNS {
			t.Fatalf("%s renewal: %d %s", kind, r.status, r.raw)
		}
		if r := f.do(http.MethodGet, leasePath(kind, "op-1"), f.token, nil, "X-Lease-Token", tok); r.status != http.StatusOK {
			t.Fatalf("%s lease GET: %d %s", kind, r.status, r.raw)
		}
	}
	// A token that matches no record settles nothing: the ambiguity stands.
	expectError(t, f.do(http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": "not-the-token"}), http.StatusForbidden, "forbidden")
	if r := f.do(http.MethodDelete, leasePath("migration", "op-1"), f.token, nil, "X-Lease-Token", g.str("token")); r.status != http.StatusNoContent {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}
	if rec := f.leaseRecord(t, "migration", "op-1"); string(rec.State) != "released" {
		t.Fatalf("the release did not end the holder's lease: %s", rec.State)
	}
}

// A lease route is authorized against the lease's own instance: a caller
// removed from that database is refused, even while another database of
// the group still lists it. (At b60db83 any database of the group did.)
func TestLeaseRoutesAreAuthorizedAgainstTheLeasesOwnInstance(t *testing.T) {
	f := newFixture(t)
	f.createDatabase(f.groupNS, "billing-app", "playground", bloodravenv1alpha1.DeploymentClient{Namespace: f.clientNS, ServiceAccount: "deploy"})
	g := f.grant("migration", "op-1", http.StatusCreated)
	f.setClients(t, f.groupNS, "counter-app", nil)

	expectError(t, f.do(http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": g.str("token")}), http.StatusForbidden, "forbidden")
	expectError(t, f.do(http.MethodGet, leasePath("migration", "op-1"), f.token, nil, "X-Lease-Token", g.str("token")), http.StatusForbidden, "forbidden")
	expectError(t, f.do(http.MethodDelete, leasePath("migration", "op-1"), f.token, nil, "X-Lease-Token", g.str("token")), http.StatusForbidden, "forbidden")
	if rec := f.leaseRecord(t, "migration", "op-1"); string(rec.State) != "active" {
		t.Fatalf("a refused request changed the lease: %s", rec.State)
	}
	// billing-app still authorizes the group routes.
	if r := f.do(http.MethodGet, groupPath, f.token, nil); r.status != http.StatusOK {
		t.Fatalf("GET group through billing-app: %d %s", r.status, r.raw)
	}
}

// forge writes a Lease as anyone with Lease write access could: a
// hand-written record, with no MAC or with one made up, over whatever the
// Lease held.
func (f *fixture) forge(name string, rec leases.Record, mac string) {
	f.t.Helper()
	data, err := json.Marshal(rec)
	if err != nil {
		f.t.Fatal(err)
	}
	l := &coordinationv1.Lease{}
	err = env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.groupNS, Name: name}, l)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		f.t.Fatal(err)
	}
	l.Namespace, l.Name = f.groupNS, name
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[leasestore.LabelDeployLease] = "true"
	l.Labels[leasestore.LabelGroup] = "playground"
	l.Labels[leasestore.LabelKind] = string(rec.Kind)
	l.Annotations = map[string]string{leasestore.RecordAnnotation: string(data)}
	if mac != "" {
		l.Annotations[leasestore.RecordMACAnnotation] = mac
	}
	if exists {
		err = env.Client.Update(f.ctx, l)
	} else {
		err = env.Client.Create(f.ctx, l)
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

// Issue 21, item 2: a record the operator did not write holds nothing. A
// Lease writer's mutex "until 2099" does not make the next grant 409 held
// (at b60db83 it did, naming the forger), is not listed, and is counted; a
// forged hold of the live operation is not listed and defers nothing the
// API reports; a forged record of the caller's own operation is never
// renewed or revived.
func TestARecordTheOperatorDidNotWriteHoldsNothing(t *testing.T) {
	forever := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, mac := range map[string]string{"no MAC": "", "a made-up MAC": "bm90IGEgbWFjIGF0IGFsbCwganVzdCBzb21lIGJ5dGVzIQ=="} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			forged := leases.Record{Group: "playground", GroupUID: string(f.group.UID), Kind: leases.KindMigration,
				OperationID: "forged-by-lease-writer", Instance: "counter-app", Identity: "system:serviceaccount:evil:writer",
				State: leases.StateActive, Generation: 1, TTLSeconds: 120, ExpiresAt: forever, GrantedAt: f.clock.Now(), RenewedAt: f.clock.Now()}
			f.forge(leases.MigrationName("playground"), forged, mac)
			waitLeaseCached(t, f.groupNS, leases.MigrationName("playground"))

			if r := f.do(http.MethodGet, groupPath, f.token, nil); r.status != http.StatusOK || strings.Contains(r.raw, "forged-by-lease-writer") {
				t.Fatalf("the observation lists the forged lease: %d %s", r.status, r.raw)
			}
			g := f.grant("migration", "op-1", http.StatusCreated)
			if f.unverified.Load() == 0 {
				t.Fatal("the forged record was not counted")
			}

			// A forged hold of the live operation, and then a forged
			// mutex record of the caller's own operation.
			hold := forged
			hold.Kind, hold.OperationID = leases.KindFailoverHold, "op-1"
			f.forge(leases.HoldName("playground", "op-1"), hold, mac)
			if r := f.do(http.MethodGet, groupPath, f.token, nil); strings.Contains(r.raw, "failover-hold") {
				t.Fatalf("the observation lists the forged hold: %s", r.raw)
			}
			own := forged
			own.OperationID, own.Identity, own.TokenHash, own.Phase = "op-1", "system:serviceaccount:"+f.clientNS+":deploy", leases.HashToken(g.str("token")), leases.PhaseDDL
			f.forge(leases.MigrationName("playground"), own, mac)
			expectError(t, f.do(http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": g.str("token")}), http.StatusNotFound, "not_found")
			// A grant of op-1 starts afresh (201): the forged record's
			// tenure and phase are not revived.
			r := f.grant("migration", "op-1", http.StatusCreated)
			if r.str("phase") != "pre-ddl" {
				t.Fatalf("the re-taken mutex carries the forged phase: %s", r.raw)
			}
		})
	}
}

// waitLeaseCached waits until the lease cache holds the Lease's latest
// version.
func waitLeaseCached(t testing.TB, ns, name string) {
	t.Helper()
	want := &coordinationv1.Lease{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, want); err != nil {
		t.Fatal(err)
	}
	waitObjectCached(t, want)
}
