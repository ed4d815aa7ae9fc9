package deployapi

import (
	"net/http"
	"strings"
	"testing"
)

// Field names are exact and appear once (docs/api.md): encoding/json alone
// would accept {"KIND":...} and let the last of two ttlSeconds win.
func TestFieldNamesAreExactAndAppearOnce(t *testing.T) {
	f := newFixture(t)
	g := f.grant("migration", "op-1", http.StatusCreated)
	tok := g.str("token")
	tests := map[string]struct {
		method, path, body string
	}{
		"grant: upper-case name":       {http.MethodPost, groupPath + "/leases", `{"KIND":"migration","operationId":"op-2","instance":"counter-app"}`},
		"grant: title-case name":       {http.MethodPost, groupPath + "/leases", `{"kind":"migration","OperationId":"op-2","instance":"counter-app"}`},
		"grant: repeated kind":         {http.MethodPost, groupPath + "/leases", `{"kind":"failover-hold","kind":"migration","operationId":"op-2","instance":"counter-app"}`},
		"grant: repeated ttlSeconds":   {http.MethodPost, groupPath + "/leases", `{"kind":"migration","operationId":"op-1","instance":"counter-app","ttlSeconds":5,"ttlSeconds":120}`},
		"grant: repeated null":         {http.MethodPost, groupPath + "/leases", `{"kind":"migration","operationId":"op-1","instance":"counter-app","ttlSeconds":null,"ttlSeconds":null}`},
		"renewal: upper-case token":    {http.MethodPut, leasePath("migration", "op-1"), `{"TOKEN":"` + tok + `"}`},
		"renewal: repeated ttlSeconds": {http.MethodPut, leasePath("migration", "op-1"), `{"token":"` + tok + `","ttlSeconds":5,"ttlSeconds":120}`},
		"renewal: repeated token":      {http.MethodPut, leasePath("migration", "op-1"), `{"token":"wrong","token":"` + tok + `"}`},
		"renewal: name with a space":   {http.MethodPut, leasePath("migration", "op-1"), `{"token ":"` + tok + `"}`},
	}
	before := f.leaseRecord(t, "migration", "op-1")
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := f.do(tc.method, tc.path, f.token, tc.body)
			expectError(t, r, http.StatusBadRequest, "bad_request")
			if m := r.str("message"); m == "" || strings.Contains(m, tok) {
				t.Fatalf("message %q", m)
			}
		})
	}
	after := f.leaseRecord(t, "migration", "op-1")
	if after.TokenHash != before.TokenHash || !after.ExpiresAt.Equal(before.ExpiresAt) || after.TTLSeconds != before.TTLSeconds {
		t.Fatalf("rejected input changed the lease: %+v -> %+v", before, after)
	}
	if n := len(f.leaseObjects()); n != 1 {
		t.Fatalf("%d Lease objects; want only op-1's mutex", n)
	}
	// The exact names, an escaped spelling of them included, are accepted.
	if r := f.do(http.MethodPut, leasePath("migration", "op-1"), f.token, `{"t\u006fken":"`+tok+`","ttlSeconds":60}`); r.status != http.StatusOK || r.num("ttlSeconds") != 60 {
		t.Fatalf("escaped exact name: %d %s", r.status, r.raw)
	}
}

// Every answer under /deploy/ is JSON, for paths that name no route too,
// whatever their slashes, "." or ".." segments: never a redirect, never
// HTML. Without a token the answer is 401; with one, 404 (or the route's
// own 400/405).
func TestEveryAnswerUnderDeployIsJSON(t *testing.T) {
	f := newFixture(t)
	paths := []string{
		"/deploy", "/deploy/", "/deploy/v1", "/deploy/v1/", "/deploy/v2/groups/playground", "/deploy/v1/groups",
		"/deploy/v1/groups/", "/deploy/v1//groups/playground", "/deploy//v1/groups/playground",
		"/deploy/v1/groups/./playground", "/deploy/v1/groups/x/../playground", "/deploy/v1/groups/playground/",
		"/deploy/v1/groups/playground/leases/", "/deploy/v1/groups/playground/leases/migration",
		"/deploy/v1/groups/playground/leases/migration/op-1/", "/deploy/v1/groups/playground/leases/migration/op-1/extra",
		"/deploy/v1/groups/%2e%2e", "/deploy/v1/groups/playground%2fleases",
	}
	for _, p := range paths {
		for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions} {
			t.Run(method+" "+p, func(t *testing.T) {
				r := f.do(method, p, "", nil)
				expectError(t, r, http.StatusUnauthorized, "unauthenticated")
				r = f.do(method, p, f.token, `{}`)
				if r.status < 400 || r.str("error") == "" {
					t.Fatalf("%d %s", r.status, r.raw)
				}
				switch r.str("error") {
				case "not_found", "bad_request", "method_not_allowed", "forbidden":
				default:
					t.Fatalf("%d %s", r.status, r.raw)
				}
			})
		}
	}
}
