package deployapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
)

func TestFollowerAnswersNotLeaderBeforeAnythingElse(t *testing.T) {
	f := newFixture(t)
	f.leader.Store(false)
	for _, tc := range []struct{ method, path, bearer string }{
		{http.MethodGet, groupPath, f.token},
		{http.MethodGet, groupPath, ""},
		{http.MethodPost, groupPath + "/leases", "garbage"},
		{http.MethodPatch, groupPath, ""},
	} {
		expectError(t, f.do(tc.method, tc.path, tc.bearer, nil), http.StatusServiceUnavailable, "not_leader")
	}
}

func TestAuthentication(t *testing.T) {
	f := newFixture(t)
	wrongAudience := f.serviceAccountToken(f.clientNS, "deploy", "some-other-api")
	tests := map[string]struct {
		header string
	}{
		"no Authorization header":        {header: ""},
		"not a bearer scheme":            {header: "Basic " + f.token},
		"empty bearer":                   {header: "Bearer "},
		"an invalid token":               {header: "Bearer not-a-token"},
		"a token for another audience":   {header: "Bearer " + wrongAudience},
		"a token with its last byte cut": {header: "Bearer " + f.token[:len(f.token)-1]},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := f.do(http.MethodGet, groupPath, "", nil, "Authorization", tc.header)
			expectError(t, r, http.StatusUnauthorized, "unauthenticated")
		})
	}
	t.Run("the right audience is accepted, the scheme case-insensitively", func(t *testing.T) {
		r := f.do(http.MethodGet, groupPath, "", nil, "Authorization", "bearer "+f.token)
		if r.status != http.StatusOK {
			t.Fatalf("status %d: %s", r.status, r.raw)
		}
	})
}

func TestAuthorization(t *testing.T) {
	f := newFixture(t)
	strangerNS := env.Namespace(t)
	stranger := f.serviceAccountToken(strangerNS, "deploy", "bloodraven-deploy")

	t.Run("a caller not in deploymentClients is forbidden on every route", func(t *testing.T) {
		expectError(t, f.do(http.MethodGet, groupPath, stranger, nil), http.StatusForbidden, "forbidden")
		expectError(t, f.do(http.MethodPost, groupPath+"/leases", stranger, grantBody("migration", "op-1", nil)), http.StatusForbidden, "forbidden")
		expectError(t, f.do(http.MethodPut, leasePath("migration", "op-1"), stranger, map[string]any{"token": "x"}), http.StatusForbidden, "forbidden")
		expectError(t, f.do(http.MethodDelete, leasePath("migration", "op-1"), stranger, nil), http.StatusForbidden, "forbidden")
	})
	t.Run("a 403 does not reveal whether the group exists", func(t *testing.T) {
		existing := f.do(http.MethodGet, groupPath, stranger, nil)
		missing := f.do(http.MethodGet, "/deploy/v1/groups/no-such-group", stranger, nil)
		if existing.status != missing.status || existing.raw != missing.raw {
			t.Fatalf("existing group: %d %s; missing group: %d %s", existing.status, existing.raw, missing.status, missing.raw)
		}
		// Also for an authorized caller naming a group that does not exist.
		expectError(t, f.do(http.MethodGet, "/deploy/v1/groups/no-such-group", f.token, nil), http.StatusForbidden, "forbidden")
	})
	t.Run("a POST naming an instance the caller may not use is forbidden", func(t *testing.T) {
		f.createDatabase(f.groupNS, "other-app", "playground", bloodravenv1alpha1.DeploymentClient{Namespace: strangerNS, ServiceAccount: "deploy"})
		r := f.do(http.MethodPost, groupPath+"/leases", f.token, map[string]any{"kind": "migration", "operationId": "op-1", "instance": "other-app"})
		expectError(t, r, http.StatusForbidden, "forbidden")
		r = f.do(http.MethodPost, groupPath+"/leases", f.token, map[string]any{"kind": "migration", "operationId": "op-1", "instance": "no-such-db"})
		expectError(t, r, http.StatusForbidden, "forbidden")
		if n := len(f.leaseObjects()); n != 0 {
			t.Fatalf("%d Lease objects after forbidden requests", n)
		}
	})
	t.Run("the database's SQL name is not the instance", func(t *testing.T) {
		r := f.do(http.MethodPost, groupPath+"/leases", f.token, map[string]any{"kind": "migration", "operationId": "op-1", "instance": "counter"})
		expectError(t, r, http.StatusForbidden, "forbidden")
	})
	t.Run("authorization is read fresh: removing the client revokes access at once", func(t *testing.T) {
		if r := f.do(http.MethodGet, groupPath, f.token, nil); r.status != http.StatusOK {
			t.Fatalf("before: %d %s", r.status, r.raw)
		}
		db := &bloodravenv1alpha1.MysqlDatabase{}
		if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.groupNS, Name: "counter-app"}, db); err != nil {
			t.Fatal(err)
		}
		saved := db.Spec.DeploymentClients
		db.Spec.DeploymentClients = nil
		if err := env.Client.Update(f.ctx, db); err != nil {
			t.Fatal(err)
		}
		expectError(t, f.do(http.MethodGet, groupPath, f.token, nil), http.StatusForbidden, "forbidden")
		db.Spec.DeploymentClients = saved
		if err := env.Client.Update(f.ctx, db); err != nil {
			t.Fatal(err)
		}
		waitDatabaseCached(t, db) // an added client may be refused until the cache proposes it
		if r := f.do(http.MethodGet, groupPath, f.token, nil); r.status != http.StatusOK {
			t.Fatalf("after restoring: %d %s", r.status, r.raw)
		}
	})
}

// The same caller is authorized for a group named "playground" in two
// namespaces: a request that cannot tell them apart is refused, one whose
// instance or lease settles it is served.
func TestAmbiguousGroupAcrossNamespaces(t *testing.T) {
	f := newFixture(t)
	otherNS := env.Namespace(t)
	f.createGroup(otherNS, "playground", 1)
	f.createDatabase(otherNS, "billing-app", "playground", bloodravenv1alpha1.DeploymentClient{Namespace: f.clientNS, ServiceAccount: "deploy"})

	expectError(t, f.do(http.MethodGet, groupPath, f.token, nil), http.StatusForbidden, "forbidden")
	r := f.do(http.MethodPost, groupPath+"/leases", f.token, map[string]any{"kind": "migration", "operationId": "op-1", "instance": "billing-app"})
	if r.status != http.StatusCreated {
		t.Fatalf("instance-settled POST: %d %s", r.status, r.raw)
	}
	var list coordinationv1.LeaseList
	if err := env.Client.List(f.ctx, &list, client.InNamespace(otherNS)); err != nil || len(list.Items) != 1 {
		t.Fatalf("lease not in the instance's namespace: %d items, %v", len(list.Items), err)
	}
	// A renewal carries no instance, but its lease settles it: the
	// namespace whose record matches the token (docs/api.md, tenants).
	if rr := f.do(http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": r.str("token")}); rr.status != http.StatusOK || rr.str("namespace") != otherNS {
		t.Fatalf("lease-settled renewal: %d %s", rr.status, rr.raw)
	}
	// A token that matches no record settles nothing: ambiguous again.
	expectError(t, f.do(http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": "stale"}), http.StatusForbidden, "forbidden")
}

func TestBadInputIsRejectedAndChangesNothing(t *testing.T) {
	f := newFixture(t)
	big := `{"kind":"migration","operationId":"op-1","instance":"counter-app","pad":"` + strings.Repeat("x", 17<<10) + `"}`
	tests := map[string]struct {
		method, path string
		body         any
		status       int
		code         string
	}{
		"malformed JSON":             {http.MethodPost, groupPath + "/leases", `{"kind":`, 400, "bad_request"},
		"not an object":              {http.MethodPost, groupPath + "/leases", `["migration"]`, 400, "bad_request"},
		"empty body":                 {http.MethodPost, groupPath + "/leases", ``, 400, "bad_request"},
		"trailing data":              {http.MethodPost, groupPath + "/leases", `{"kind":"migration","operationId":"op-1","instance":"counter-app"} {}`, 400, "bad_request"},
		"unknown field":              {http.MethodPost, groupPath + "/leases", `{"kind":"migration","operationId":"op-1","instance":"counter-app","force":true}`, 400, "bad_request"},
		"unknown kind":               {http.MethodPost, groupPath + "/leases", grantBody("mutex", "op-1", nil), 400, "bad_request"},
		"missing kind":               {http.MethodPost, groupPath + "/leases", `{"operationId":"op-1","instance":"counter-app"}`, 400, "bad_request"},
		"empty operationId":          {http.MethodPost, groupPath + "/leases", grantBody("migration", "", nil), 400, "bad_request"},
		"oversized operationId":      {http.MethodPost, groupPath + "/leases", grantBody("migration", strings.Repeat("a", 129), nil), 400, "bad_request"},
		"operationId with a slash":   {http.MethodPost, groupPath + "/leases", grantBody("migration", "a/b", nil), 400, "bad_request"},
		"empty instance":             {http.MethodPost, groupPath + "/leases", `{"kind":"migration","operationId":"op-1","instance":""}`, 400, "bad_request"},
		"oversized instance":         {http.MethodPost, groupPath + "/leases", `{"kind":"migration","operationId":"op-1","instance":"` + strings.Repeat("a", 254) + `"}`, 400, "bad_request"},
		"instance not a name":        {http.MethodPost, groupPath + "/leases", `{"kind":"migration","operationId":"op-1","instance":"Counter App"}`, 400, "bad_request"},
		"fractional ttl":             {http.MethodPost, groupPath + "/leases", grantBody("migration", "op-1", 30.5), 400, "bad_request"},
		"ttl as a string":            {http.MethodPost, groupPath + "/leases", grantBody("migration", "op-1", "30"), 400, "bad_request"},
		"ttl in exponent form":       {http.MethodPost, groupPath + "/leases", `{"kind":"migration","operationId":"op-1","instance":"counter-app","ttlSeconds":3e1}`, 400, "bad_request"},
		"ttl as a boolean":           {http.MethodPost, groupPath + "/leases", grantBody("migration", "op-1", true), 400, "bad_request"},
		"body over 16 KiB":           {http.MethodPost, groupPath + "/leases", big, 413, "too_large"},
		"renewal with unknown field": {http.MethodPut, leasePath("migration", "op-1"), `{"token":"x","extra":1}`, 400, "bad_request"},
		"renewal of an unknown kind": {http.MethodPut, leasePath("mutex", "op-1"), `{"token":"x"}`, 400, "bad_request"},
		"renewal with a bad op":      {http.MethodPut, leasePath("migration", "-op"), `{"token":"x"}`, 400, "bad_request"},
		"renewal body over 16 KiB":   {http.MethodPut, leasePath("migration", "op-1"), `{"token":"` + strings.Repeat("x", 17<<10) + `"}`, 413, "too_large"},
		"release of an unknown kind": {http.MethodDelete, leasePath("mutex", "op-1"), nil, 400, "bad_request"},
		"PATCH on a lease":           {http.MethodPatch, leasePath("migration", "op-1"), `{}`, 405, "method_not_allowed"},
		"POST on the group":          {http.MethodPost, groupPath, `{}`, 405, "method_not_allowed"},
		"GET on the lease list":      {http.MethodGet, groupPath + "/leases", nil, 405, "method_not_allowed"},
		"unknown path":               {http.MethodGet, "/deploy/v1/nothing", nil, 404, "not_found"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := f.do(tc.method, tc.path, f.token, tc.body)
			expectError(t, r, tc.status, tc.code)
			if tc.code == "bad_request" && r.str("message") == "" {
				t.Fatalf("400 without a message: %s", r.raw)
			}
		})
	}
	if n := len(f.leaseObjects()); n != 0 {
		t.Fatalf("bad input created %d Lease objects", n)
	}
	t.Run("unauthenticated bad input is 401, not 400 (authentication first)", func(t *testing.T) {
		expectError(t, f.do(http.MethodPost, groupPath+"/leases", "", `{"kind":`), 401, "unauthenticated")
	})
	t.Run("unauthorized well-formed input is 403, malformed is 400 (shape before authorization)", func(t *testing.T) {
		expectError(t, f.do(http.MethodPost, "/deploy/v1/groups/nope/leases", f.token, `{"kind":`), 400, "bad_request")
		expectError(t, f.do(http.MethodPost, "/deploy/v1/groups/nope/leases", f.token, grantBody("migration", "op-1", nil)), 403, "forbidden")
	})
}

func TestMigrationGrantRegrantAndTokenRotation(t *testing.T) {
	f := newFixture(t)
	first := f.grant("migration", "op-1", http.StatusCreated)
	for _, k := range []string{"kind", "operationId", "instance", "token", "expiresAt"} {
		if first.str(k) == "" {
			t.Fatalf("grant lacks %s: %s", k, first.raw)
		}
	}
	if first.num("topologyGeneration") != 1 || first.num("ttlSeconds") != 30 {
		t.Fatalf("grant = %s", first.raw)
	}
	exp, err := time.Parse(time.RFC3339Nano, first.str("expiresAt"))
	if err != nil || !strings.HasSuffix(first.str("expiresAt"), "Z") {
		t.Fatalf("expiresAt %q is not RFC 3339 UTC: %v", first.str("expiresAt"), err)
	}
	if want := f.clock.Now().Add(30 * time.Second); !exp.Equal(want) {
		t.Fatalf("expiresAt = %v, want now+30s = %v", exp, want)
	}

	f.clock.Step(10 * time.Second)
	second := f.grant("migration", "op-1", http.StatusOK)
	if second.str("token") == first.str("token") {
		t.Fatal("re-grant returned the same token")
	}
	exp2, _ := time.Parse(time.RFC3339Nano, second.str("expiresAt"))
	if want := f.clock.Now().Add(30 * time.Second); !exp2.Equal(want) {
		t.Fatalf("re-grant expiresAt = %v, want restarted at now+30s = %v", exp2, want)
	}
	expectError(t, f.do(http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": first.str("token")}), 403, "token_mismatch")
	if r := f.do(http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": second.str("token")}); r.status != 200 {
		t.Fatalf("renew with the new token: %d %s", r.status, r.raw)
	}
}

func TestMigrationIsHeldByOneOperation(t *testing.T) {
	f := newFixture(t)
	first := f.grant("migration", "op-1", http.StatusCreated)
	r := f.do(http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", "op-2", nil))
	expectError(t, r, http.StatusConflict, "held")
	holder, _ := r.body["holder"].(map[string]any)
	if holder["operationId"] != "op-1" || holder["instance"] != "counter-app" || holder["expiresAt"] != first.str("expiresAt") {
		t.Fatalf("holder = %v", holder)
	}
	t.Run("after the holder expires another operation takes the mutex", func(t *testing.T) {
		f.clock.Step(31 * time.Second)
		f.grant("migration", "op-2", http.StatusCreated)
		expectError(t, f.do(http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": first.str("token")}), 404, "not_found")
	})
}

func TestTTLClamp(t *testing.T) {
	tests := map[string]struct {
		ttl  any
		want float64
	}{
		"omitted":       {ttl: nil, want: 30},
		"null":          {ttl: json.RawMessage("null"), want: 30},
		"zero":          {ttl: 0, want: 5},
		"negative":      {ttl: -7, want: 5},
		"below min":     {ttl: 4, want: 5},
		"in range":      {ttl: 45, want: 45},
		"above max":     {ttl: 121, want: 120},
		"beyond int64":  {ttl: json.RawMessage("123456789012345678901234567890"), want: 120},
		"very negative": {ttl: json.RawMessage("-123456789012345678901234567890"), want: 5},
	}
	f := newFixture(t)
	i := 0
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			i++
			op := "ttl-" + strings.ReplaceAll(name, " ", "-")
			r := f.do(http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", op, tc.ttl))
			if r.status != http.StatusCreated || r.num("ttlSeconds") != tc.want {
				t.Fatalf("status %d ttl %v, want 201 ttl %v: %s", r.status, r.num("ttlSeconds"), tc.want, r.raw)
			}
			exp, _ := time.Parse(time.RFC3339Nano, r.str("expiresAt"))
			if want := f.clock.Now().Add(time.Duration(tc.want) * time.Second); !exp.Equal(want) {
				t.Fatalf("expiresAt %v, want %v", exp, want)
			}
			if d := f.do(http.MethodDelete, leasePath("migration", op), f.token, nil, "X-Lease-Token", r.str("token")); d.status != 204 {
				t.Fatalf("release: %d %s", d.status, d.raw)
			}
		})
	}
	t.Run("a renewal without ttlSeconds keeps the lease's ttl", func(t *testing.T) {
		g := f.do(http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", "keep", 90))
		f.clock.Step(time.Second)
		r := f.do(http.MethodPut, leasePath("migration", "keep"), f.token, map[string]any{"token": g.str("token")})
		if r.status != 200 || r.num("ttlSeconds") != 90 {
			t.Fatalf("renew: %d %s", r.status, r.raw)
		}
		r = f.do(http.MethodPut, leasePath("migration", "keep"), f.token, map[string]any{"token": g.str("token"), "ttlSeconds": 500})
		if r.status != 200 || r.num("ttlSeconds") != 120 {
			t.Fatalf("renew with 500: %d %s", r.status, r.raw)
		}
	})
}

func TestFailoverHoldOnlyForTheMigrationHolder(t *testing.T) {
	f := newFixture(t)
	expectError(t, f.do(http.MethodPost, groupPath+"/leases", f.token, grantBody("failover-hold", "op-1", nil)), 403, "migration_not_held")
	f.grant("migration", "op-1", http.StatusCreated)
	expectError(t, f.do(http.MethodPost, groupPath+"/leases", f.token, grantBody("failover-hold", "op-2", nil)), 403, "migration_not_held")

	// Same operation, another instance the caller may use: still not the holder.
	f.createDatabase(f.groupNS, "second-app", "playground", bloodravenv1alpha1.DeploymentClient{Namespace: f.clientNS, ServiceAccount: "deploy"})
	r := f.do(http.MethodPost, groupPath+"/leases", f.token, map[string]any{"kind": "failover-hold", "operationId": "op-1", "instance": "second-app"})
	expectError(t, r, 403, "migration_not_held")

	hold := f.grant("failover-hold", "op-1", http.StatusCreated)
	if hold.str("kind") != "failover-hold" || hold.num("topologyGeneration") != 1 {
		t.Fatalf("hold = %s", hold.raw)
	}
	f.grant("failover-hold", "op-1", http.StatusOK)

	g := f.do(http.MethodGet, groupPath, f.token, nil)
	ls, _ := g.body["leases"].([]any)
	if len(ls) != 2 {
		t.Fatalf("GET leases = %v, want migration and hold", g.body["leases"])
	}
}

func TestRenewalAndExpiry(t *testing.T) {
	f := newFixture(t)
	g := f.grant("migration", "op-1", http.StatusCreated)
	tok := g.str("token")
	f.clock.Step(20 * time.Second)
	r := f.do(http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": tok, "ttlSeconds": 30})
	if r.status != 200 {
		t.Fatalf("renew: %d %s", r.status, r.raw)
	}
	exp, _ := time.Parse(time.RFC3339Nano, r.str("expiresAt"))
	if want := f.clock.Now().Add(30 * time.Second); !exp.Equal(want) || r.num("topologyGeneration") != 1 || r.str("instance") != "counter-app" {
		t.Fatalf("renewal = %s, want expiresAt %v", r.raw, want)
	}
	if _, ok := r.body["token"]; ok {
		t.Fatal("a renewal must not return a token")
	}

	f.clock.Step(30 * time.Second) // exactly at expiresAt: still live
	if r := f.do(http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": tok}); r.status != 200 {
		t.Fatalf("renew at expiresAt: %d %s", r.status, r.raw)
	}
	f.clock.Step(30*time.Second + time.Millisecond) // now > expiresAt
	expectError(t, f.do(http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": tok}), 404, "not_found")
	expectError(t, f.do(http.MethodPut, leasePath("migration", "never-granted"), f.token, map[string]any{"token": tok}), 404, "not_found")
	expectError(t, f.do(http.MethodPut, leasePath("failover-hold", "op-1"), f.token, map[string]any{"token": tok}), 404, "not_found")
}

func TestRelease(t *testing.T) {
	f := newFixture(t)
	g := f.grant("migration", "op-1", http.StatusCreated)
	expectError(t, f.do(http.MethodDelete, leasePath("migration", "op-1"), f.token, nil), 403, "token_mismatch")
	expectError(t, f.do(http.MethodDelete, leasePath("migration", "op-1"), f.token, nil, "X-Lease-Token", "wrong"), 403, "token_mismatch")
	r := f.do(http.MethodDelete, leasePath("migration", "op-1"), f.token, nil, "X-Lease-Token", g.str("token"))
	if r.status != http.StatusNoContent || r.raw != "" {
		t.Fatalf("release: %d %q", r.status, r.raw)
	}
	for name, path := range map[string]string{
		"released again": leasePath("migration", "op-1"),
		"never existed":  leasePath("migration", "op-9"),
		"absent hold":    leasePath("failover-hold", "op-1"),
	} {
		if r := f.do(http.MethodDelete, path, f.token, nil); r.status != http.StatusNoContent || r.raw != "" {
			t.Fatalf("%s: %d %q", name, r.status, r.raw)
		}
	}
	expectError(t, f.do(http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": g.str("token")}), 404, "not_found")
	// The mutex is free again.
	f.grant("migration", "op-2", http.StatusCreated)
}

func TestFenceRevokesOnGenerationChangeAndTombstonesPersist(t *testing.T) {
	f := newFixture(t)
	m := f.grant("migration", "op-1", http.StatusCreated)
	h := f.grant("failover-hold", "op-1", http.StatusCreated)

	f.setStatus(func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) { s.TopologyGeneration = 2; s.ActiveSite = "pdx" })

	r := f.do(http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": m.str("token")})
	expectError(t, r, http.StatusConflict, "revoked")
	if r.str("reason") != "topology_changed" || r.num("topologyGeneration") != 2 {
		t.Fatalf("revoked body = %s", r.raw)
	}
	// The hold of the same operation went with it.
	r = f.do(http.MethodPut, leasePath("failover-hold", "op-1"), f.token, map[string]any{"token": h.str("token")})
	expectError(t, r, http.StatusConflict, "revoked")

	// A re-grant never resurrects the operation, for either kind.
	expectError(t, f.do(http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", "op-1", nil)), 409, "revoked")
	expectError(t, f.do(http.MethodPost, groupPath+"/leases", f.token, grantBody("failover-hold", "op-1", nil)), 409, "revoked")

	// Another operation takes the mutex under the new generation.
	n := f.grant("migration", "op-2", http.StatusCreated)
	if n.num("topologyGeneration") != 2 {
		t.Fatalf("new grant generation = %v, want 2", n.num("topologyGeneration"))
	}
	// The old operation still gets 409 revoked, with the current generation.
	f.setStatus(func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) { s.TopologyGeneration = 3; s.ActiveSite = "iad" })
	r = f.do(http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", "op-1", nil))
	expectError(t, r, 409, "revoked")
	if r.num("topologyGeneration") != 3 {
		t.Fatalf("revoked generation = %v, want the current 3", r.num("topologyGeneration"))
	}
	r = f.do(http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": m.str("token")})
	expectError(t, r, 409, "revoked")
	// DELETE of a revoked lease is idempotent.
	if r := f.do(http.MethodDelete, leasePath("migration", "op-1"), f.token, nil, "X-Lease-Token", m.str("token")); r.status != 204 {
		t.Fatalf("delete revoked: %d %s", r.status, r.raw)
	}
	// The tombstone is a Lease owned by the group.
	var tomb coordinationv1.Lease
	if err := env.Client.Get(f.ctx, client.ObjectKey{Namespace: f.groupNS, Name: leases.TombstoneName("playground", "op-1")}, &tomb); err != nil {
		t.Fatalf("tombstone: %v", err)
	}
	if len(tomb.OwnerReferences) != 1 || tomb.OwnerReferences[0].UID != f.group.UID || tomb.OwnerReferences[0].Kind != "MysqlFailoverGroup" {
		t.Fatalf("tombstone owner = %+v", tomb.OwnerReferences)
	}
}

func TestOperatorRevocationIsReported(t *testing.T) {
	f := newFixture(t)
	m := f.grant("migration", "op-1", http.StatusCreated)
	revoked, err := f.store.Revoke(f.ctx, f.group, "op-1", leases.ReasonOperatorRevoked)
	if err != nil || len(revoked.Records) != 1 {
		t.Fatalf("revoke: %v (%d revoked)", err, len(revoked.Records))
	}
	r := f.do(http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": m.str("token")})
	expectError(t, r, 409, "revoked")
	if r.str("reason") != "operator_revoked" || r.num("topologyGeneration") != 1 {
		t.Fatalf("body = %s", r.raw)
	}
	if again, err := f.store.Revoke(f.ctx, f.group, "op-1", leases.ReasonOperatorRevoked); err != nil || len(again.Records) != 0 {
		t.Fatalf("second revoke: %v, %d revoked (want idempotent)", err, len(again.Records))
	}
}

func TestUnstableIsNeverARenewal(t *testing.T) {
	f := newFixture(t)
	m := f.grant("migration", "op-1", http.StatusCreated)
	h := f.grant("failover-hold", "op-1", http.StatusCreated)
	storedExpiry := func(name string) time.Time {
		o, err := f.store.Get(f.ctx, f.groupNS, name, true)
		if err != nil || o == nil {
			t.Fatalf("get %s: %v", name, err)
		}
		return o.Record.ExpiresAt
	}
	before := storedExpiry(leases.MigrationName("playground"))

	f.setStatus(func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) {
		s.Transition = &bloodravenv1alpha1.TopologyTransition{Operation: "PlannedFailover", TargetSite: "pdx", Generation: 2, StartedAt: metav1.NewTime(f.clock.Now())}
	})
	f.clock.Step(5 * time.Second)
	r := f.do(http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": m.str("token")})
	expectError(t, r, http.StatusLocked, "unstable")
	if r.num("retryAfterSeconds") <= 0 || r.header.Get("Retry-After") == "" {
		t.Fatalf("423 without retryAfterSeconds: %s", r.raw)
	}
	if after := storedExpiry(leases.MigrationName("playground")); !after.Equal(before) {
		t.Fatalf("a 423 moved expiresAt from %v to %v", before, after)
	}
	expectError(t, f.do(http.MethodPost, groupPath+"/leases", f.token, grantBody("migration", "op-1", nil)), 423, "unstable")
	g := f.do(http.MethodGet, groupPath, f.token, nil)
	if g.status != 200 || g.body["stable"] != false || g.str("unstableReason") != "TopologyTransition" {
		t.Fatalf("GET during a transition: %d %s", g.status, g.raw)
	}

	// A reservation blocks holds, not the migration mutex.
	f.setStatus(func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) {
		s.Transition = nil
		s.Reservation = &bloodravenv1alpha1.OperationReservation{Operation: "PlannedFailover", ID: "req-42", ReservedAt: metav1.NewTime(f.clock.Now())}
	})
	holdBefore := storedExpiry(leases.HoldName("playground", "op-1"))
	expectError(t, f.do(http.MethodPut, leasePath("failover-hold", "op-1"), f.token, map[string]any{"token": h.str("token")}), 423, "unstable")
	expectError(t, f.do(http.MethodPost, groupPath+"/leases", f.token, grantBody("failover-hold", "op-1", nil)), 423, "unstable")
	if got := storedExpiry(leases.HoldName("playground", "op-1")); !got.Equal(holdBefore) {
		t.Fatal("a 423 moved the hold's expiry")
	}
	if r := f.do(http.MethodPut, leasePath("migration", "op-1"), f.token, map[string]any{"token": m.str("token")}); r.status != 200 {
		t.Fatalf("migration renewal during a reservation: %d %s", r.status, r.raw)
	}
}

func TestGetGroupObservation(t *testing.T) {
	f := newFixture(t)
	r := f.do(http.MethodGet, groupPath, f.token, nil)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	want := map[string]any{"group": "playground", "namespace": f.groupNS, "activeSite": "iad", "topologyGeneration": float64(1),
		"stable": true, "unstableReason": ""}
	for k, v := range want {
		if r.body[k] != v {
			t.Errorf("%s = %v, want %v", k, r.body[k], v)
		}
	}
	health, _ := r.body["health"].(map[string]any)
	for _, k := range []string{"ready", "degradedReason", "replicationRunning", "replicationLagSeconds", "recoveryPending"} {
		if _, ok := health[k]; !ok {
			t.Errorf("health lacks %s", k)
		}
	}
	if health["replicationLagSeconds"] != 0.4 {
		t.Errorf("lag = %v", health["replicationLagSeconds"])
	}
	ops, _ := r.body["operations"].(map[string]any)
	pf, _ := ops["plannedFailover"].(map[string]any)
	if _, ok := pf["phase"]; !ok || ops["updatePhase"] != "" || ops["restoreInPlace"] != "" || ops["dragonflyUpgrade"] != "" {
		t.Errorf("operations = %v", ops)
	}
	if ls, ok := r.body["leases"].([]any); !ok || len(ls) != 0 {
		t.Errorf("leases = %v, want []", r.body["leases"])
	}

	g := f.grant("migration", "op-1", http.StatusCreated)
	f.setStatus(func(s *bloodravenv1alpha1.MysqlFailoverGroupStatus) {
		s.PlannedFailover = &bloodravenv1alpha1.PlannedFailoverStatus{ID: "req-42", TargetSite: "pdx", Phase: bloodravenv1alpha1.PlannedFailoverPhaseDeferred, Reason: "DeploymentHold"}
	})
	// The observation shows the group as the operator's cache holds it: the
	// status change shows once the cache has it.
	_ = wait.PollUntilContextTimeout(f.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		r = f.do(http.MethodGet, groupPath, f.token, nil)
		return r.body["stable"] == false, nil
	}) // a timeout is reported by the assertion below
	if r.body["stable"] != false || r.str("unstableReason") != "PlannedFailoverDeferred" {
		t.Fatalf("deferred: stable=%v reason=%q", r.body["stable"], r.str("unstableReason"))
	}
	ops, _ = r.body["operations"].(map[string]any)
	if pf, _ := ops["plannedFailover"].(map[string]any); pf["phase"] != "Deferred" || pf["reason"] != "DeploymentHold" {
		t.Fatalf("plannedFailover = %v", ops["plannedFailover"])
	}
	ls, _ := r.body["leases"].([]any)
	if len(ls) != 1 {
		t.Fatalf("leases = %v", r.body["leases"])
	}
	l, _ := ls[0].(map[string]any)
	if l["kind"] != "migration" || l["operationId"] != "op-1" || l["instance"] != "counter-app" || l["expiresAt"] != g.str("expiresAt") || l["topologyGeneration"] != float64(1) {
		t.Fatalf("lease entry = %v", l)
	}
	if len(l) != 5 {
		t.Fatalf("lease entry has extra fields: %v", l)
	}
	f.clock.Step(31 * time.Second)
	r = f.do(http.MethodGet, groupPath, f.token, nil)
	if ls, _ := r.body["leases"].([]any); len(ls) != 0 {
		t.Fatalf("an expired lease is still listed: %v", ls)
	}
}
