package deployapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shipstream/bloodraven/deployclient/wire"
	"github.com/shipstream/bloodraven/internal/testenv"
	"github.com/shipstream/bloodraven/store"
)

// docs/api.md is the contract in the repository: every error the code can
// answer, every route, header and limit must be on it.
func TestAPIDocCoversTheContract(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	errs := []*apiError{
		errBadRequest("x"), errUnauthenticated, errForbidden, errMigrationNotHeld, errTokenMismatch, errNotFound,
		errMethodNotAllowed, errHeld("a", "b", time.Now()), errRevoked("topology_changed", 1), errTooLarge, errUnstable(),
		errNotLeader, errFromAPIServer(store.ErrContended), errFromAPIServer(fmt.Errorf("boom")), errRateLimited(1, limitRate),
	}
	for _, e := range errs {
		row := fmt.Sprintf("| %d | `%s` |", e.status, e.code)
		if !strings.Contains(doc, row) {
			t.Errorf("docs/api.md has no error row %q", row)
		}
		raw, err := json.Marshal(e.body())
		if err != nil {
			t.Fatal(err)
		}
		var fields map[string]any
		if err := json.Unmarshal(raw, &fields); err != nil {
			t.Fatal(err)
		}
		for field := range fields {
			if field != "message" && !strings.Contains(doc, "`"+field) {
				t.Errorf("docs/api.md does not name the field %q of %s", field, e.code)
			}
		}
	}
	// Every member of every body, as package wire defines them.
	for _, body := range []any{
		wire.GrantRequest{}, wire.RenewRequest{}, wire.Lease{}, wire.Grant{}, wire.Group{}, wire.Health{},
		wire.Operations{}, wire.Planned{}, wire.ListedLease{}, wire.Admission{}, wire.Error{}, wire.Holder{},
	} {
		for _, m := range wire.Members(body) {
			if !strings.Contains(doc, "`"+m+"`") && !strings.Contains(doc, `"`+m+`"`) {
				t.Errorf("docs/api.md does not name the member %q of %T", m, body)
			}
		}
	}
	for _, rt := range (&Server{}).routes() {
		route := "`" + rt.method + " " + httprouterParam.ReplaceAllString(rt.path, "{$1}")
		if !strings.Contains(doc, route+"`") && !strings.Contains(doc, route+" ") {
			t.Errorf("docs/api.md does not name the route %s`", route)
		}
	}
	for _, want := range []string{
		"`Authorization: Bearer <token>`", "`X-Lease-Token", "`Retry-After`",
		"`topology_changed`", "`operator_revoked`", "[5, 120]", "16 KiB", "bloodraven-deploy",
		strings.TrimSuffix(PathPrefix, "/"), "`migration`", "`failover-hold`",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/api.md does not mention %s", want)
		}
	}
	for _, st := range []int{http.StatusOK, http.StatusCreated, http.StatusNoContent} {
		if !strings.Contains(doc, fmt.Sprintf("`%d`", st)) {
			t.Errorf("docs/api.md does not give the success status %d", st)
		}
	}
}
