package deployapi

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// frozenProposer is a cache that stopped: it proposes the databases it
// held when it was made, whatever the API server holds since. It stands in
// for the informer cache at its worst (lagging), to show that the cache
// only proposes and the uncached GET decides.
type frozenProposer struct {
	items []bloodravenv1alpha1.MysqlDatabase
}

func freezeDatabases(t testing.TB, ns string) *frozenProposer {
	t.Helper()
	var list bloodravenv1alpha1.MysqlDatabaseList
	if err := env.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return &frozenProposer{items: list.Items}
}

func (p *frozenProposer) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	panic("authorization proposes by List only")
}

func (p *frozenProposer) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	l := list.(*bloodravenv1alpha1.MysqlDatabaseList)
	for i := range p.items {
		l.Items = append(l.Items, *p.items[i].DeepCopy())
	}
	return nil
}

// serverProposingFrom is the fixture's API with another proposer.
func (f *fixture) serverProposingFrom(t testing.TB, p client.Reader) *Server {
	t.Helper()
	s, err := New(Config{IsLeader: func() bool { return true }, Clock: f.clock, Kube: env.Kube, API: env.Client, Databases: p,
		Leases: &leasestore.Store{Client: env.Client, Cached: leaseCache, API: env.Client, Clock: f.clock, Key: testRecordKey}, Log: f.srv.log})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (f *fixture) setClients(t testing.TB, ns, name string, clients []bloodravenv1alpha1.DeploymentClient) {
	t.Helper()
	db := &bloodravenv1alpha1.MysqlDatabase{}
	if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: ns, Name: name}, db); err != nil {
		t.Fatal(err)
	}
	db.Spec.DeploymentClients = clients
	if err := env.Client.Update(f.ctx, db); err != nil {
		t.Fatal(err)
	}
}

// Removing a client from deploymentClients refuses its very next request,
// on every route, while the cache still proposes the database (a frozen
// cache) and with the informer cache as it is (no wait for it).
func TestRemovingAClientRefusesItsNextRequest(t *testing.T) {
	for _, proposer := range []string{"frozen cache", "informer cache"} {
		for _, tc := range []struct {
			name string
			do   func(f *fixture, s *Server, token string) response
		}{
			{"GET group", func(f *fixture, s *Server, _ string) response {
				return f.doWith(s, http.MethodGet, groupPath, f.token, nil)
			}},
			{"POST grant", func(f *fixture, s *Server, _ string) response {
				return f.doWith(s, http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", "op-2", 30))
			}},
			{"PUT renewal", func(f *fixture, s *Server, token string) response {
				return f.doWith(s, http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": token})
			}},
			{"DELETE release", func(f *fixture, s *Server, token string) response {
				return f.doWith(s, http.MethodDelete, leasePath("migration", "op-1"), f.token, nil, "X-Lease-Token", token)
			}},
		} {
			t.Run(proposer+"/"+tc.name, func(t *testing.T) {
				f := newFixture(t)
				s := f.srv
				if proposer == "frozen cache" {
					s = f.serverProposingFrom(t, freezeDatabases(t, f.groupNS))
				}
				g := f.grant("migration", "op-1", http.StatusCreated)
				if r := f.doWith(s, http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": g.str("token")}); r.status != http.StatusOK {
					t.Fatalf("renewal before the removal: %d %s", r.status, r.raw)
				}
				f.setClients(t, f.groupNS, "counter-app", nil)
				expectError(t, tc.do(f, s, g.str("token")), http.StatusForbidden, "forbidden")
				if rec := f.leaseRecord(t, "migration", "op-1"); rec.TokenHash == "" || string(rec.State) != "active" {
					t.Fatalf("a refused request changed the lease: %+v", rec)
				}
			})
		}
	}
}

// The cache proposes; it never authorizes. A database the cache says lists
// the caller, but the API server says does not, gives 403 (never a false
// 200); a database the cache has not seen gives 403 until it has (a brief
// false 403).
func TestTheCacheProposesAndTheAPIServerDecides(t *testing.T) {
	f := newFixture(t)
	stale := freezeDatabases(t, f.groupNS)
	f.setClients(t, f.groupNS, "counter-app", []bloodravenv1alpha1.DeploymentClient{{Namespace: f.clientNS, ServiceAccount: "someone-else"}})
	expectError(t, f.doWith(f.serverProposingFrom(t, stale), http.MethodGet, groupPath, f.token, nil), http.StatusForbidden, "forbidden")

	f.setClients(t, f.groupNS, "counter-app", []bloodravenv1alpha1.DeploymentClient{{Namespace: f.clientNS, ServiceAccount: "deploy"}})
	empty := &frozenProposer{}
	expectError(t, f.doWith(f.serverProposingFrom(t, empty), http.MethodGet, groupPath, f.token, nil), http.StatusForbidden, "forbidden")
	if r := f.doWith(f.serverProposingFrom(t, freezeDatabases(t, f.groupNS)), http.MethodGet, groupPath, f.token, nil); r.status != http.StatusOK {
		t.Fatalf("once proposed: %d %s", r.status, r.raw)
	}
}

// A second namespace is read only when the cache proposes one; when its
// database confirms, the answer is the ambiguity 403 even though the first
// namespace confirmed too.
func TestAmbiguityIsConfirmedByTheAPIServer(t *testing.T) {
	f := newFixture(t)
	otherNS := env.Namespace(t)
	f.createGroup(otherNS, "playground", 1)
	f.createDatabase(otherNS, "billing-app", "playground")
	both := &frozenProposer{items: append(freezeDatabases(t, f.groupNS).items, freezeDatabases(t, otherNS).items...)}
	both.items[len(both.items)-1].Spec.DeploymentClients = []bloodravenv1alpha1.DeploymentClient{{Namespace: f.clientNS, ServiceAccount: "deploy"}}
	// The cache thinks billing-app lists the caller; the API server says it
	// does not: no ambiguity.
	if r := f.doWith(f.serverProposingFrom(t, both), http.MethodGet, groupPath, f.token, nil); r.status != http.StatusOK || r.str("namespace") != f.groupNS {
		t.Fatalf("only %s confirms: %d %s", f.groupNS, r.status, r.raw)
	}
	f.setClients(t, otherNS, "billing-app", []bloodravenv1alpha1.DeploymentClient{{Namespace: f.clientNS, ServiceAccount: "deploy"}})
	expectError(t, f.doWith(f.serverProposingFrom(t, both), http.MethodGet, groupPath, f.token, nil), http.StatusForbidden, "forbidden")
}

// What a request costs does not depend on the databases of the cluster: the
// candidates come from the cache's index, never from a LIST, and a steady
// renewal reads one database by name however many other databases exist.
func TestAuthorizationNeverListsDatabases(t *testing.T) {
	f := newFixture(t)
	other := env.Namespace(t)
	for _, name := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		f.createDatabase(other, "unrelated-"+name, "elsewhere-"+name, bloodravenv1alpha1.DeploymentClient{Namespace: f.clientNS, ServiceAccount: "deploy"})
	}
	f.createDatabase(f.groupNS, "unrelated-x", "elsewhere-x", bloodravenv1alpha1.DeploymentClient{Namespace: f.clientNS, ServiceAccount: "deploy"})
	log := &requestLog{}
	s := f.countingServer(t, log)
	g := f.doWith(s, http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", "op-1", 30))
	f.doWith(s, http.MethodGet, groupPath, f.token, nil)
	f.doWith(s, http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": g.str("token")})
	f.doWith(s, http.MethodDelete, leasePath("migration", "op-1"), f.token, nil, "X-Lease-Token", g.str("token"))
	dbGets := 0
	for _, q := range log.take() {
		if strings.HasPrefix(q, "GET ") && strings.HasSuffix(q, "/mysqldatabases") {
			t.Fatalf("authorization listed databases: %s", q)
		}
		if strings.HasPrefix(q, "GET ") && strings.Contains(q, "/mysqldatabases/") {
			if !strings.HasSuffix(q, "/mysqldatabases/counter-app") {
				t.Fatalf("authorization read a database that is not the group's: %s", q)
			}
			dbGets++
		}
	}
	// One each, and the migration grant a second: the schema-verification
	// gate, read after the mutex (gate.View).
	if dbGets != 5 {
		t.Fatalf("%d database reads for 4 requests; want one each and the grant's gate read", dbGets)
	}
}

// leaseRecord reads the operation's lease of kind from the API server.
func (f *fixture) leaseRecord(t testing.TB, kind, op string) *leases.Record {
	t.Helper()
	k, _ := leases.ParseRequestKind(kind)
	o, err := f.store.Get(f.ctx, f.groupNS, leases.LeaseName(k, "playground", op), true)
	if err != nil || o == nil {
		t.Fatalf("lease %s/%s: %v (present: %v)", kind, op, err, o != nil)
	}
	return o.Record
}
