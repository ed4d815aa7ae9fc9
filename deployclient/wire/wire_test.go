package wire

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestMembersFlattenEmbeddedBodiesAndSkipHiddenFields(t *testing.T) {
	type withHidden struct {
		Grant
		Local bool `json:"-"`
	}
	for _, tc := range []struct {
		name string
		body any
		want []string
	}{
		{"grant request", GrantRequest{}, []string{"kind", "operationId", "instance", "ttlSeconds"}},
		{"renew request", RenewRequest{}, []string{"token", "ttlSeconds", "phase"}},
		{"grant is the lease and its token", Grant{}, []string{"kind", "operationId", "instance", "expiresAt", "topologyGeneration", "ttlSeconds", "namespace", "phase", "token"}},
		{"a json:\"-\" field is not a member", withHidden{}, Members(Grant{})},
		{"a pointer is its element", &Holder{}, []string{"operationId", "instance", "expiresAt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Members(tc.body); !slices.Equal(got, tc.want) {
				t.Fatalf("Members = %v, want %v", got, tc.want)
			}
		})
	}
}

// Members are the names encoding/json writes: a body with every field set
// encodes exactly them.
func TestMembersAreWhatEncodingJSONWrites(t *testing.T) {
	full := Error{Error: CodeRevoked, Message: "m", Holder: &Holder{}, Reason: "r", OperationID: "o", TopologyGeneration: 2, RetryAfterSeconds: 1}
	raw, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, name := range Members(full) {
		if _, ok := m[name]; !ok {
			t.Errorf("member %s not written", name)
		}
		delete(m, name)
	}
	if len(m) != 0 {
		t.Errorf("written but not a member: %v", m)
	}
}

func TestPhasesOnlyMoveForward(t *testing.T) {
	order := []Phase{PhasePreDDL, PhaseDDL, PhaseDone}
	for i, p := range order {
		for j, q := range order {
			if got := p.Before(q); got != (i < j) {
				t.Errorf("%q.Before(%q) = %v, want %v", p, q, got, i < j)
			}
		}
	}
	if Phase("").Before(PhasePreDDL) || !Phase("").Before(PhaseDDL) {
		t.Error("the empty phase must rank with pre-ddl")
	}
}
