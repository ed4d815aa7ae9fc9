package scene

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/shipstream/bloodraven/deployclient/wire"
)

func TestAnswersAreHeldAgainstTheWireTypes(t *testing.T) {
	for _, tc := range []struct {
		name, method, path string
		status             int
		want               any
	}{
		{"an error anywhere under /deploy/v1", http.MethodPost, "/deploy/v1/groups/g/leases", 409, &wire.Error{}},
		{"the group", http.MethodGet, "/deploy/v1/groups/g", 200, &wire.Group{}},
		{"a grant", http.MethodPost, "/deploy/v1/groups/g/leases", 201, &wire.Grant{}},
		{"a renewal", http.MethodPut, "/deploy/v1/groups/g/leases/migration/op", 200, &wire.Lease{}},
		{"a held lease GET", http.MethodGet, "/deploy/v1/groups/g/leases/migration/op?x=1", 200, &wire.Lease{}},
		{"outside the API", http.MethodGet, "/metrics", 200, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := wireBody(tc.method, tc.path, tc.status); fmt.Sprintf("%T", got) != fmt.Sprintf("%T", tc.want) {
				t.Fatalf("wireBody = %T, want %T", got, tc.want)
			}
		})
	}
}

func TestAMemberTheWireLacksFailsTheAnswer(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error":"held","holderr":{}}`))
	})
	c := ForHandler(h, "t")
	if _, err := c.Send(http.MethodPost, "/deploy/v1/groups/g/leases", `{}`); err == nil {
		t.Fatal("an answer with a member outside wire.Error was accepted")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error":"held","holder":{"operationId":"a","instance":"b","expiresAt":"c"}}`))
	}))
	defer srv.Close()
	r, err := ForURL(srv.URL, srv.Client(), "t").Send(http.MethodPost, "/deploy/v1/groups/g/leases", `{}`)
	if err != nil || r.Str("error") != "held" {
		t.Fatalf("a wire error was refused: %v %+v", err, r)
	}
}
