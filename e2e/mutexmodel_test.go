package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The sequential model of the migration mutex, as docs/api.md and docs/leases.md state
// it, for one group and leases that do not expire within a history (ttl
// 120 s): one holder at a time; a grant to the holder's own operation
// re-grants and rotates the token; only the current token renews or
// releases. A move of the topology (a planned failover completing: the
// generation +1) revokes the holder at once: from then on its renewal and
// its re-grant answer 409 revoked, and no operation holds the mutex across
// the bump.
//
// A grant answered 423 unstable holds nothing after its answer, but its
// record may have been seen during its window: a grant that read the group
// before a move writes its record, other grants may answer 409 held naming
// it, and its own confirming read withdraws it (docs/leases.md, "Only
// authority live at the move is fenced by it": its token was never handed
// out, so it held no authority, and the move does not revoke it). The
// recorder puts such a grant in the history as two operations over its
// window: "tentative" (it may take the free mutex, with a token no one has
// seen) and "withdraw" (it ends that, and no tentative of the same attempt
// takes effect after it). So the record can explain a held answer only
// within the grant's own window.

type mutexState struct {
	holder, token string
	gen           int64
	// revoked lists the operations a move revoked, as "|a|b|" (a string
	// keeps the state comparable).
	revoked string
	// withdrawn lists the 423-answered grant attempts already withdrawn,
	// the same way.
	withdrawn string
}

func (s mutexState) isRevoked(op string) bool { return strings.Contains(s.revoked, "|"+op+"|") }

func (s mutexState) isWithdrawn(attempt string) bool {
	return strings.Contains(s.withdrawn, "|"+attempt+"|")
}

// tentativeToken is the token of a 423-answered grant attempt's record:
// never handed out.
func tentativeToken(attempt string) string { return "tentative token of " + attempt }

// free is s without a holder.
func (s mutexState) free() mutexState {
	s.holder, s.token = "", ""
	return s
}

// heldBy is s with op holding the mutex with token.
func (s mutexState) heldBy(op, token string) mutexState {
	s.holder, s.token = op, token
	return s
}

type mutexInput struct {
	verb  string // grant, renew, release, move; tentative, withdraw (a grant answered 423)
	op    string
	token string // renew, release: the token the client sent
	// attempt names one grant answered 423 (tentative, withdraw).
	attempt string
}

type mutexOutput struct {
	// outcome: ok (200/201/204), held (409 held), not_found (404),
	// token_mismatch (403), revoked (409 revoked), unstable (423: nothing
	// written), unknown (no answer, or an answer that does not say whether
	// the request took effect).
	outcome string
	token   string // a grant's new token
	holder  string // 409 held: the holder's operation
	gen     int64  // move: the generation it wrote
	// status and answeredAt, for unknown: the 5xx that came back and when
	// (status 0: no answer at all).
	status     int
	answeredAt int64
}

// newMutexModel is the model for a group at generation gen. It is
// nondeterministic: a request without a verdict ("unknown": a 5xx, or no
// answer) may or may not have taken effect, so it steps to both states.
// (porcupine turns it into a deterministic model over sets of states.)
func newMutexModel(gen int64) porcupine.Model {
	return (&porcupine.NondeterministicModel{
		Init: func() []any { return []any{mutexState{gen: gen, revoked: "|", withdrawn: "|"}} },
		Step: func(state, input, output any) []any {
			s, in, out := state.(mutexState), input.(mutexInput), output.(mutexOutput)
			mine := s.holder == in.op
			if out.outcome == "unstable" && in.verb != "move" && in.verb != "tentative" && in.verb != "withdraw" {
				return []any{s} // 423: nothing written
			}
			switch in.verb {
			case "move":
				if out.gen != s.gen+1 {
					return nil
				}
				next := s
				next.gen = out.gen
				if s.holder != "" && !strings.HasPrefix(s.token, tentativeToken("")) {
					next.revoked += s.holder + "|"
					next = next.free()
				}
				// A tentative record is not revoked: its own request
				// withdraws it.
				return []any{next}
			case "tentative":
				if s.isWithdrawn(in.attempt) || s.holder != "" || s.isRevoked(in.op) {
					return []any{s}
				}
				return []any{s, s.heldBy(in.op, tentativeToken(in.attempt))}
			case "withdraw":
				next := s
				next.withdrawn += in.attempt + "|"
				if s.token == tentativeToken(in.attempt) {
					next = next.free()
				}
				return []any{next}
			case "grant":
				free := (s.holder == "" || mine) && !s.isRevoked(in.op)
				switch {
				case out.outcome == "revoked" && s.isRevoked(in.op):
					return []any{s}
				case out.outcome == "ok" && free:
					return []any{s.heldBy(in.op, out.token)}
				case out.outcome == "held" && !mine && s.holder != "" && out.holder == s.holder && !s.isRevoked(in.op):
					return []any{s}
				case out.outcome == "unknown" && free:
					// Its token was never seen by anyone, so all such tokens of
					// one operation are alike: one state for them keeps the
					// checker's search small.
					return []any{s, s.heldBy(in.op, "unseen token of "+in.op)}
				case out.outcome == "unknown":
					return []any{s}
				}
			case "renew":
				switch {
				case out.outcome == "ok" && mine && in.token == s.token,
					out.outcome == "revoked" && s.isRevoked(in.op),
					out.outcome == "not_found" && !mine && !s.isRevoked(in.op),
					out.outcome == "token_mismatch" && mine && in.token != s.token,
					out.outcome == "unknown":
					return []any{s}
				}
			case "release":
				switch {
				case out.outcome == "ok" && mine && in.token == s.token:
					return []any{s.free()}
				case out.outcome == "ok" && !mine,
					out.outcome == "token_mismatch" && mine && in.token != s.token:
					return []any{s}
				case out.outcome == "unknown" && mine && in.token == s.token:
					return []any{s, s.free()}
				case out.outcome == "unknown":
					return []any{s}
				}
			}
			return nil
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(mutexInput), output.(mutexOutput)
			if in.verb == "move" {
				return fmt.Sprintf("move -> generation %d", out.gen)
			}
			if in.verb == "tentative" || in.verb == "withdraw" {
				return fmt.Sprintf("%s(%s) of a grant answered %s", in.verb, in.attempt, out.outcome)
			}
			return fmt.Sprintf("%s(%s) -> %s", in.verb, in.op, out.outcome)
		},
	}).ToModel()
}

// mutexModel is the model for the playground's group, bootstrapped at
// generation 1.
var mutexModel = newMutexModel(1)

// The model itself: it accepts what the contract allows and rejects two
// holders and a rotated-out token that still renews.
func TestMutexModel(t *testing.T) {
	t.Parallel() // a pure check of the model: it needs no machine of its own (e2e/doc.go, "Phases")
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
		"a move revokes the holder: its renewal and its re-grant answer revoked, another operation may take the mutex": {[]porcupine.Operation{
			op(0, 0, 1, mutexInput{verb: "grant", op: "a"}, mutexOutput{outcome: "ok", token: "t1"}),
			op(2, 2, 3, mutexInput{verb: "move"}, mutexOutput{outcome: "ok", gen: 2}),
			op(0, 4, 5, mutexInput{verb: "renew", op: "a", token: "t1"}, mutexOutput{outcome: "revoked"}),
			op(0, 6, 7, mutexInput{verb: "grant", op: "a"}, mutexOutput{outcome: "revoked"}),
			op(1, 8, 9, mutexInput{verb: "grant", op: "b"}, mutexOutput{outcome: "ok", token: "t2"}),
		}, true},
		"a holder renews across the move": {[]porcupine.Operation{
			op(0, 0, 1, mutexInput{verb: "grant", op: "a"}, mutexOutput{outcome: "ok", token: "t1"}),
			op(2, 2, 3, mutexInput{verb: "move"}, mutexOutput{outcome: "ok", gen: 2}),
			op(0, 4, 5, mutexInput{verb: "renew", op: "a", token: "t1"}, mutexOutput{outcome: "ok"}),
		}, false},
		"a revoked operation is granted again after the move": {[]porcupine.Operation{
			op(0, 0, 1, mutexInput{verb: "grant", op: "a"}, mutexOutput{outcome: "ok", token: "t1"}),
			op(2, 2, 3, mutexInput{verb: "move"}, mutexOutput{outcome: "ok", gen: 2}),
			op(0, 4, 5, mutexInput{verb: "release", op: "a", token: "t1"}, mutexOutput{outcome: "ok"}),
			op(0, 6, 7, mutexInput{verb: "grant", op: "a"}, mutexOutput{outcome: "ok", token: "t3"}),
		}, false},
		"an operation released before the move is not revoked by it": {[]porcupine.Operation{
			op(0, 0, 1, mutexInput{verb: "grant", op: "a"}, mutexOutput{outcome: "ok", token: "t1"}),
			op(0, 2, 3, mutexInput{verb: "release", op: "a", token: "t1"}, mutexOutput{outcome: "ok"}),
			op(2, 4, 5, mutexInput{verb: "move"}, mutexOutput{outcome: "ok", gen: 2}),
			op(0, 6, 7, mutexInput{verb: "grant", op: "a"}, mutexOutput{outcome: "ok", token: "t3"}),
		}, true},
		"a move that skips a generation": {[]porcupine.Operation{
			op(2, 0, 1, mutexInput{verb: "move"}, mutexOutput{outcome: "ok", gen: 3}),
		}, false},
		"a grant answered 423 may be seen as the holder within its window, and a move in it does not revoke it": {[]porcupine.Operation{
			op(0, 0, 10, mutexInput{verb: "tentative", op: "a", attempt: "a@0"}, mutexOutput{outcome: "unstable"}),
			op(0, 0, 10, mutexInput{verb: "withdraw", op: "a", attempt: "a@0"}, mutexOutput{outcome: "unstable"}),
			op(1, 2, 3, mutexInput{verb: "grant", op: "b"}, mutexOutput{outcome: "held", holder: "a"}),
			op(2, 4, 5, mutexInput{verb: "move"}, mutexOutput{outcome: "ok", gen: 2}),
			op(1, 6, 7, mutexInput{verb: "grant", op: "b"}, mutexOutput{outcome: "held", holder: "a"}),
			op(0, 11, 12, mutexInput{verb: "grant", op: "a"}, mutexOutput{outcome: "ok", token: "t1"}),
		}, true},
		"a grant answered 423 holds nothing after its answer": {[]porcupine.Operation{
			op(0, 0, 1, mutexInput{verb: "tentative", op: "a", attempt: "a@0"}, mutexOutput{outcome: "unstable"}),
			op(0, 0, 1, mutexInput{verb: "withdraw", op: "a", attempt: "a@0"}, mutexOutput{outcome: "unstable"}),
			op(1, 2, 3, mutexInput{verb: "grant", op: "b"}, mutexOutput{outcome: "held", holder: "a"}),
		}, false},
		"a grant answered 423 takes no mutex that is held": {[]porcupine.Operation{
			op(1, 0, 1, mutexInput{verb: "grant", op: "b"}, mutexOutput{outcome: "ok", token: "t1"}),
			op(0, 2, 5, mutexInput{verb: "tentative", op: "a", attempt: "a@2"}, mutexOutput{outcome: "unstable"}),
			op(0, 2, 5, mutexInput{verb: "withdraw", op: "a", attempt: "a@2"}, mutexOutput{outcome: "unstable"}),
			op(2, 3, 4, mutexInput{verb: "grant", op: "c"}, mutexOutput{outcome: "held", holder: "a"}),
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

// An illegal history's diagnosis names the operation the checker could not
// place: what the CI log keeps when the visualization is lost.
func TestStuckAtNamesTheOperationThatCannotBePlaced(t *testing.T) {
	t.Parallel() // a pure check (e2e/doc.go, "Phases")
	ops := []porcupine.Operation{
		{ClientId: 0, Call: 0, Return: 1e6, Input: mutexInput{verb: "grant", op: "a"}, Output: mutexOutput{outcome: "ok", token: "t1"}},
		{ClientId: moveClient, Call: 2e6, Return: 3e6, Input: mutexInput{verb: "move"}, Output: mutexOutput{outcome: "ok", gen: 2}},
		{ClientId: 1, Call: 4e6, Return: 5e6, Input: mutexInput{verb: "grant", op: "b"}, Output: mutexOutput{outcome: "held", holder: "a"}},
	}
	res, info := porcupine.CheckOperationsVerbose(mutexModel, ops, time.Minute)
	if res != porcupine.Illegal {
		t.Fatalf("result %v, want Illegal", res)
	}
	got := strings.Join(stuckAt(ops, info), "\n")
	placed, unplaced, ok := strings.Cut(got, "could not place")
	if !ok || !strings.Contains(unplaced, `grant(b, token ) [+2, +3] ms -> held token  holder "a"`) || strings.Contains(placed, "grant(b") {
		t.Fatalf("diagnosis:\n%s", got)
	}
}
