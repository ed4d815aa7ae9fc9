package e2e

import (
	"fmt"
	"testing"

	"github.com/anishathalye/porcupine"
)

// The sequential model of the migration mutex, as DESIGN §3 states it, for
// one group and leases that do not expire within a history (ttl 120 s):
// one holder at a time; a grant to the holder's own operation re-grants and
// rotates the token; only the current token renews or releases.

type mutexState struct {
	holder, token string
}

type mutexInput struct {
	verb  string // grant, renew, release
	op    string
	token string // renew, release: the token the client sent
}

type mutexOutput struct {
	// outcome: ok (200/201/204), held (409 held), not_found (404),
	// token_mismatch (403), unknown (no answer, or an answer that does
	// not say whether the request took effect).
	outcome string
	token   string // a grant's new token
	holder  string // 409 held: the holder's operation
	// status and answeredAt, for unknown: the 5xx that came back and when
	// (status 0: no answer at all).
	status     int
	answeredAt int64
}

// mutexModel is nondeterministic: a request without a verdict ("unknown":
// a 5xx, or no answer) may or may not have taken effect, so it steps to
// both states. (porcupine turns it into a deterministic model over sets of
// states.)
var mutexModel = (&porcupine.NondeterministicModel{
	Init: func() []any { return []any{mutexState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(mutexState), input.(mutexInput), output.(mutexOutput)
		mine := s.holder == in.op
		switch in.verb {
		case "grant":
			free := s.holder == "" || mine
			switch {
			case out.outcome == "ok" && free:
				return []any{mutexState{holder: in.op, token: out.token}}
			case out.outcome == "held" && !free && out.holder == s.holder:
				return []any{s}
			case out.outcome == "unknown" && free:
				// Its token was never seen by anyone, so all such tokens of
				// one operation are alike: one state for them keeps the
				// checker's search small.
				return []any{s, mutexState{holder: in.op, token: "unseen token of " + in.op}}
			case out.outcome == "unknown":
				return []any{s}
			}
		case "renew":
			switch {
			case out.outcome == "ok" && mine && in.token == s.token,
				out.outcome == "not_found" && !mine,
				out.outcome == "token_mismatch" && mine && in.token != s.token,
				out.outcome == "unknown":
				return []any{s}
			}
		case "release":
			switch {
			case out.outcome == "ok" && mine && in.token == s.token:
				return []any{mutexState{}}
			case out.outcome == "ok" && !mine,
				out.outcome == "token_mismatch" && mine && in.token != s.token:
				return []any{s}
			case out.outcome == "unknown" && mine && in.token == s.token:
				return []any{s, mutexState{}}
			case out.outcome == "unknown":
				return []any{s}
			}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(mutexInput), output.(mutexOutput)
		return fmt.Sprintf("%s(%s) -> %s", in.verb, in.op, out.outcome)
	},
}).ToModel()

// The model itself: it accepts what the contract allows and rejects two
// holders and a rotated-out token that still renews.
func TestMutexModel(t *testing.T) {
	op := func(client int, call, ret int64, in mutexInput, out mutexOutput) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: in, Output: out}
	}
	tests := map[string]struct {
		history []porcupine.Operation
		legal   bool
	}{
		"grant, renew, release, grant": {[]porcupine.Operation{
			op(0, 0, 1, mutexInput{verb: "grant", op: "a"}, mutexOutput{outcome: "ok", token: "t1"}),
			op(0, 2, 3, mutexInput{verb: "renew", op: "a", token: "t1"}, mutexOutput{outcome: "ok"}),
			op(1, 2, 3, mutexInput{verb: "grant", op: "b"}, mutexOutput{outcome: "held", holder: "a"}),
			op(0, 4, 5, mutexInput{verb: "release", op: "a", token: "t1"}, mutexOutput{outcome: "ok"}),
			op(1, 6, 7, mutexInput{verb: "grant", op: "b"}, mutexOutput{outcome: "ok", token: "t2"}),
		}, true},
		"two holders": {[]porcupine.Operation{
			op(0, 0, 1, mutexInput{verb: "grant", op: "a"}, mutexOutput{outcome: "ok", token: "t1"}),
			op(1, 2, 3, mutexInput{verb: "grant", op: "b"}, mutexOutput{outcome: "ok", token: "t2"}),
		}, false},
		"a rotated-out token still renews": {[]porcupine.Operation{
			op(0, 0, 1, mutexInput{verb: "grant", op: "a"}, mutexOutput{outcome: "ok", token: "t1"}),
			op(0, 2, 3, mutexInput{verb: "grant", op: "a"}, mutexOutput{outcome: "ok", token: "t2"}),
			op(0, 4, 5, mutexInput{verb: "renew", op: "a", token: "t1"}, mutexOutput{outcome: "ok"}),
		}, false},
		"a grant without an answer may have rotated the token": {[]porcupine.Operation{
			op(0, 0, 1, mutexInput{verb: "grant", op: "a"}, mutexOutput{outcome: "ok", token: "t1"}),
			op(0, 2, 1<<62, mutexInput{verb: "grant", op: "a"}, mutexOutput{outcome: "unknown"}),
			op(1, 3, 4, mutexInput{verb: "renew", op: "a", token: "t1"}, mutexOutput{outcome: "token_mismatch"}),
		}, true},
		"a grant without an answer may never have happened": {[]porcupine.Operation{
			op(0, 0, 1<<62, mutexInput{verb: "grant", op: "a"}, mutexOutput{outcome: "unknown"}),
			op(1, 3, 4, mutexInput{verb: "grant", op: "b"}, mutexOutput{outcome: "ok", token: "t2"}),
		}, true},
		"a grant answered 503 within its window may have had no effect": {[]porcupine.Operation{
			op(0, 0, 1, mutexInput{verb: "grant", op: "a"}, mutexOutput{outcome: "unknown", status: 503}),
			op(1, 3, 4, mutexInput{verb: "grant", op: "b"}, mutexOutput{outcome: "ok", token: "t2"}),
		}, true},
		"a release answered 503 may have had no effect": {[]porcupine.Operation{
			op(0, 0, 1, mutexInput{verb: "grant", op: "a"}, mutexOutput{outcome: "ok", token: "t1"}),
			op(0, 2, 3, mutexInput{verb: "release", op: "a", token: "t1"}, mutexOutput{outcome: "unknown", status: 503}),
			op(1, 4, 5, mutexInput{verb: "grant", op: "b"}, mutexOutput{outcome: "held", holder: "a"}),
			op(0, 6, 7, mutexInput{verb: "renew", op: "a", token: "t1"}, mutexOutput{outcome: "ok"}),
		}, true},
		"a release answered 503 may have taken effect": {[]porcupine.Operation{
			op(0, 0, 1, mutexInput{verb: "grant", op: "a"}, mutexOutput{outcome: "ok", token: "t1"}),
			op(0, 2, 3, mutexInput{verb: "release", op: "a", token: "t1"}, mutexOutput{outcome: "unknown", status: 503}),
			op(1, 4, 5, mutexInput{verb: "grant", op: "b"}, mutexOutput{outcome: "ok", token: "t2"}),
		}, true},
		"a release that took effect and one that did not, both seen": {[]porcupine.Operation{
			op(0, 0, 1, mutexInput{verb: "grant", op: "a"}, mutexOutput{outcome: "ok", token: "t1"}),
			op(0, 2, 3, mutexInput{verb: "release", op: "a", token: "t1"}, mutexOutput{outcome: "unknown", status: 503}),
			op(1, 4, 5, mutexInput{verb: "grant", op: "b"}, mutexOutput{outcome: "ok", token: "t2"}),
			op(0, 6, 7, mutexInput{verb: "renew", op: "a", token: "t1"}, mutexOutput{outcome: "ok"}),
		}, false},
		"held names the wrong holder": {[]porcupine.Operation{
			op(0, 0, 1, mutexInput{verb: "grant", op: "a"}, mutexOutput{outcome: "ok", token: "t1"}),
			op(1, 2, 3, mutexInput{verb: "grant", op: "b"}, mutexOutput{outcome: "held", holder: "c"}),
		}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := porcupine.CheckOperations(mutexModel, tc.history); got != tc.legal {
				t.Fatalf("linearizable = %v, want %v", got, tc.legal)
			}
		})
	}
}
