package deployapi

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shipstream/bloodraven/internal/testenv"
	"github.com/shipstream/bloodraven/leasestore"
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
		errNotLeader, errFromKube(leasestore.ErrContended), errFromKube(fmt.Errorf("boom")), errRateLimited(1, limitRate),
	}
	for _, e := range errs {
		row := fmt.Sprintf("| %d | `%s` |", e.status, e.code)
		if !strings.Contains(doc, row) {
			t.Errorf("docs/api.md has no error row %q", row)
		}
		for field := range e.fields {
			if field != "message" && !strings.Contains(doc, "`"+field) {
				t.Errorf("docs/api.md does not name the field %q of %s", field, e.code)
			}
		}
	}
	for _, want := range []string{
		"`GET /deploy/v1/groups/{group}`",
		"`POST /deploy/v1/groups/{group}/leases`",
		"`PUT /deploy/v1/groups/{group}/leases/{kind}/{operationId}`",
		"`DELETE /deploy/v1/groups/{group}/leases/{kind}/{operationId}`",
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
