package deployapi

import (
	"strings"
	"testing"

	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/policy"
)

// FuzzDecodeGrant: any body either decodes into a valid request or is a 400
// with a message; never a panic, never an accepted request with invalid
// fields.
func FuzzDecodeGrant(f *testing.F) {
	for _, seed := range []string{
		`{"kind":"migration","operationId":"11111111-1111-4111-8111-111111111111","instance":"orders-app","ttlSeconds":30}`,
		`{"kind":"failover-hold","operationId":"a","instance":"b"}`,
		`{"kind":"migration","operationId":"a","instance":"b","ttlSeconds":null}`,
		`{"kind":"migration","operationId":"a","instance":"b","ttlSeconds":-99999999999999999999}`,
		`{"kind":"migration","operationId":"a","instance":"b","ttlSeconds":1.5}`,
		`{"kind":"migration","operationId":"a","instance":"b","x":1}`,
		`{"kind":1}`, `[]`, `null`, ``, `{`, `{}{}`, "\x00",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, kind, e := decodeGrant(body)
		if e != nil {
			if e.status != 400 || e.code != "bad_request" || e.extra.Message == "" {
				t.Fatalf("rejection is not a 400 with a message: %+v", e)
			}
			return
		}
		if kind != "migration" && kind != "failover-hold" {
			t.Fatalf("accepted kind %q", kind)
		}
		if validateOperationID(req.OperationID) != nil || validateInstance(req.Instance) != nil {
			t.Fatalf("accepted invalid request %+v", req)
		}
		ttl := policy.ClampTTL(req.TTLSeconds.ptr(), leases.DefaultTTLSeconds)
		if ttl < leases.MinTTLSeconds || ttl > leases.MaxTTLSeconds {
			t.Fatalf("ttl %d out of bounds", ttl)
		}
	})
}

// FuzzDecodeRenew: the same for renewal bodies.
func FuzzDecodeRenew(f *testing.F) {
	for _, seed := range []string{`{"token":"abc","ttlSeconds":30}`, `{"token":""}`, `{"ttlSeconds":"30"}`, `{"token":` + strings.Repeat("[", 100), `{"token":"a","phase":"ddl"}`, `{"token":"a","phase":"DDL"}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, phase, e := decodeRenew(body, leases.KindMigration)
		if e != nil {
			if e.status != 400 || e.code != "bad_request" {
				t.Fatalf("rejection is not a 400: %+v", e)
			}
			return
		}
		if len(req.Token) > 1024 {
			t.Fatal("accepted an oversized token")
		}
		if _, ok := leases.ParsePhase(string(phase)); phase != "" && !ok {
			t.Fatalf("accepted phase %q", phase)
		}
	})
}
