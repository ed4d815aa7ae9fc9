package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestAuxHandlerNeverServesDeployAPI(t *testing.T) {
	h := NewAuxHandler(func() StatusInfo { return StatusInfo{Version: "v-test", Leader: true} })
	paths := []string{"/deploy", "/deploy/", "/deploy/v1", "/deploy/v1/groups/playground",
		"/deploy/v1/groups/playground/leases", "/deploy/v1/groups/playground/leases/migration/op-1"}
	methods := []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch}
	for _, p := range paths {
		for _, m := range methods {
			t.Run(m+" "+p, func(t *testing.T) {
				rec := httptest.NewRecorder()
				req := httptest.NewRequest(m, p, strings.NewReader(`{"kind":"migration"}`))
				req.Header.Set("Authorization", "Bearer secret")
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusNotFound {
					t.Fatalf("status = %d, want 404", rec.Code)
				}
				var body map[string]string
				if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body["error"] != "not_found" {
					t.Fatalf("body = %q, want {\"error\":\"not_found\"}", rec.Body.String())
				}
			})
		}
	}
}

func TestAuxHandlerStatusPage(t *testing.T) {
	h := NewAuxHandler(func() StatusInfo { return StatusInfo{Version: "v-test", Leader: true, DeployAPI: true} })
	tests := map[string]struct {
		method, path string
		wantStatus   int
	}{
		"root shows status":       {http.MethodGet, "/", http.StatusOK},
		"status path":             {http.MethodGet, "/status", http.StatusOK},
		"post to status refused":  {http.MethodPost, "/status", http.StatusMethodNotAllowed},
		"unknown path is missing": {http.MethodGet, "/nope", http.StatusNotFound},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			if rec.Code != tc.wantStatus {
				t.Fatalf("status = %d, want %d", rec.Code, tc.wantStatus)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Fatalf("content type = %q", ct)
			}
			if tc.wantStatus == http.StatusOK {
				var got StatusInfo
				if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
					t.Fatal(err)
				}
				if !got.Leader || got.Version != "v-test" || !got.DeployAPI {
					t.Fatalf("status = %+v", got)
				}
			}
		})
	}
}

func TestLeaderStateFollowsElection(t *testing.T) {
	var l LeaderState
	elected := make(chan struct{})
	stop := make(chan struct{})
	defer close(stop)
	l.WatchElected(elected, stop)
	if l.IsLeader() {
		t.Fatal("leader before election")
	}
	close(elected)
	for i := 0; !l.IsLeader(); i++ {
		if i > 1000 {
			t.Fatal("not leader after election")
		}
		runtimeGosched()
	}
}
