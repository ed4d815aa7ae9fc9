package leases

import (
	"testing"
	"time"
)

func TestFencedByMove(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	moved := now.Add(-10 * time.Second)
	move := Move{Generation: 3, At: moved}
	mk := func(state State, gen int64, exp time.Time) *Record {
		return &Record{GroupUID: "u", Kind: KindMigration, OperationID: "a", State: state, Generation: gen, ExpiresAt: exp}
	}
	released := func(at time.Time) *Record { r := mk(StateReleased, 2, now.Add(time.Minute)); r.EndedAt = at; return r }
	tests := map[string]struct {
		rec  *Record
		move Move
		want bool
	}{
		"live across the move":                     {mk(StateActive, 2, now.Add(time.Minute)), move, true},
		"expired after the move":                   {mk(StateActive, 2, moved.Add(time.Second)), move, true},
		"recorded expired after the move":          {mk(StateExpired, 2, moved.Add(time.Second)), move, true},
		"expired exactly at the move":              {mk(StateActive, 2, moved), move, true},
		"expired before the move":                  {mk(StateActive, 2, moved.Add(-time.Nanosecond)), move, false},
		"released after the move":                  {released(moved.Add(time.Second)), move, true},
		"released before the move":                 {released(moved.Add(-time.Second)), move, false},
		"already revoked":                          {mk(StateRevoked, 2, now.Add(time.Minute)), move, false},
		"granted at the move's generation":         {mk(StateActive, 3, now.Add(time.Minute)), move, false},
		"granted after a move the view never saw":  {mk(StateActive, 4, now.Add(time.Minute)), move, false},
		"another incarnation of the group":         {&Record{GroupUID: "old", Kind: KindMigration, State: StateActive, Generation: 1, ExpiresAt: now.Add(time.Minute)}, move, false},
		"no move time recorded: live counts":       {mk(StateActive, 2, now.Add(time.Minute)), Move{Generation: 3}, true},
		"no move time recorded: ended ones do not": {mk(StateActive, 2, now.Add(-time.Second)), Move{Generation: 3}, false},
		"a tombstone is never fenced":              {&Record{GroupUID: "u", Kind: KindTombstone, State: StateRevoked, Generation: 1}, move, false},
		// A hold recorded expired when its mutex lapsed keeps its own later
		// expiresAt: it says nothing about the operation's authority at the
		// move (review finding).
		"a hold never fences its operation by itself":         {&Record{GroupUID: "u", Kind: KindFailoverHold, State: StateExpired, Generation: 2, ExpiresAt: now.Add(time.Minute)}, move, false},
		"a live lease whose move time is ahead of this clock": {mk(StateActive, 2, now.Add(time.Minute)), Move{Generation: 3, At: now.Add(2 * time.Minute)}, true},
		"nil": {nil, move, false},
	}
	for name, tc := range tests {
		if got := FencedByMove(tc.rec, "u", tc.move, now); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

func TestRevokeDecidesWhatARevocationWrites(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	move := Move{Generation: 3, At: now.Add(-time.Second)}
	mk := func(kind Kind, op string, state State, gen int64, exp time.Time, hash string) *Record {
		return &Record{Group: "g", GroupUID: "u", Kind: kind, OperationID: op, State: state, Generation: gen, ExpiresAt: exp, TokenHash: hash}
	}
	live := now.Add(time.Minute)
	tests := map[string]struct {
		reason    string
		recs      []*Record
		want      bool
		wantNext  int
		wantGen   int64
		wantHashs int
	}{
		"a lapsed mutex and the hold recorded expired with it, both before the move": {reason: ReasonTopologyChanged,
			recs: []*Record{mk(KindMigration, "a", StateExpired, 2, now.Add(-time.Minute), "h1"), mk(KindFailoverHold, "a", StateExpired, 2, live, "h2")}},
		"a fenced mutex and its hold": {reason: ReasonTopologyChanged, want: true, wantNext: 2, wantGen: 3, wantHashs: 2,
			recs: []*Record{mk(KindMigration, "a", StateActive, 2, live, "h1"), mk(KindFailoverHold, "a", StateActive, 2, live, "h2")}},
		"a lease at the current generation is not fenced": {reason: ReasonTopologyChanged,
			recs: []*Record{mk(KindMigration, "a", StateActive, 3, live, "h1")}},
		"the annotation revokes a live lease at any generation": {reason: ReasonOperatorRevoked, want: true, wantNext: 1, wantGen: 3, wantHashs: 1,
			recs: []*Record{mk(KindMigration, "a", StateActive, 3, live, "h1")}},
		"the annotation leaves an ended lease alone": {reason: ReasonOperatorRevoked,
			recs: []*Record{mk(KindMigration, "a", StateExpired, 3, now.Add(-time.Minute), "h1")}},
		"another operation's record is ignored": {reason: ReasonTopologyChanged,
			recs: []*Record{mk(KindMigration, "b", StateActive, 2, live, "h1")}},
		"a revoked record is not written again": {reason: ReasonTopologyChanged, want: true, wantNext: 1, wantGen: 3, wantHashs: 1,
			recs: []*Record{mk(KindMigration, "a", StateActive, 2, live, "h1"), mk(KindFailoverHold, "a", StateRevoked, 2, live, "h2")}},
	}
	for name, tc := range tests {
		rev, ok := Revoke(RevocationInput{Group: "g", GroupUID: "u", OperationID: "a", Reason: tc.reason, Move: move, Records: tc.recs, Now: now})
		if ok != tc.want || len(rev.Next) != tc.wantNext {
			t.Errorf("%s: ok %v next %d, want %v %d", name, ok, len(rev.Next), tc.want, tc.wantNext)
			continue
		}
		if !ok {
			continue
		}
		tomb := rev.Tombstone
		if tomb.Kind != KindTombstone || tomb.Generation != tc.wantGen || tomb.Reason != tc.reason || !tomb.AnnouncePending || len(tomb.RevokedTokenHashes) != tc.wantHashs {
			t.Errorf("%s: tombstone kind %s gen %d reason %s pending %v hashes %d", name, tomb.Kind, tomb.Generation, tomb.Reason, tomb.AnnouncePending, len(tomb.RevokedTokenHashes))
		}
		for _, n := range rev.Next {
			if n.State != StateRevoked || n.Reason != tc.reason {
				t.Errorf("%s: next record %s %s", name, n.State, n.Reason)
			}
		}
	}
}

func TestAHoldOfAnEarlierTenureIsDead(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	mig := NewGrant(Grant{Group: "g", GroupUID: "u", Kind: KindMigration, OperationID: "a", Instance: "app", TTLSeconds: 60}, "h", now)
	holdBefore := NewGrant(Grant{Group: "g", GroupUID: "u", Kind: KindFailoverHold, OperationID: "a", Instance: "app", TTLSeconds: 120}, "h", now.Add(-time.Second))
	holdAfter := NewGrant(Grant{Group: "g", GroupUID: "u", Kind: KindFailoverHold, OperationID: "a", Instance: "app", TTLSeconds: 120}, "h", now.Add(time.Second))
	if HoldLive(&holdBefore, &mig, now.Add(2*time.Second)) {
		t.Error("a hold granted before the mutex's tenure began defers")
	}
	if !HoldLive(&holdAfter, &mig, now.Add(2*time.Second)) {
		t.Error("a hold granted in the mutex's tenure does not defer")
	}
	regrant := NewGrant(Grant{Group: "g", GroupUID: "u", Kind: KindMigration, OperationID: "a", Instance: "app", TTLSeconds: 60, HeldSince: mig.HeldSince}, "h2", now.Add(3*time.Second))
	if !HoldLive(&holdAfter, &regrant, now.Add(4*time.Second)) {
		t.Error("a re-grant (same tenure) killed the operation's hold")
	}
	if end := DeferralEnd(&holdAfter, &mig); !end.Equal(mig.ExpiresAt) {
		t.Errorf("deferral end %v, want the mutex's expiry %v", end, mig.ExpiresAt)
	}
	if end := DeferralEnd(&holdAfter, nil); !end.Equal(holdAfter.ExpiresAt) {
		t.Errorf("deferral end without a mutex %v", end)
	}
}

// Issue 35, item 5: a migration record that may still be a grant in flight
// (written, not yet confirmed or withdrawn by its request).
func TestAwaitingConfirmation(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	mk := func(kind Kind, state State, granted, renewed time.Time) *Record {
		return &Record{Kind: kind, State: state, GrantedAt: granted, RenewedAt: renewed, ExpiresAt: now.Add(time.Minute)}
	}
	recent := now.Add(-time.Second)
	for name, tc := range map[string]struct {
		rec  *Record
		want bool
	}{
		"granted a second ago, never renewed":       {mk(KindMigration, StateActive, recent, recent), true},
		"granted exactly a window ago":              {mk(KindMigration, StateActive, now.Add(-ConfirmWindow), now.Add(-ConfirmWindow)), false},
		"renewed since its grant: it was delivered": {mk(KindMigration, StateActive, recent, now), false},
		"released":                        {mk(KindMigration, StateReleased, recent, recent), false},
		"a phase reported (by a renewal)": {func() *Record { r := mk(KindMigration, StateActive, recent, recent); r.Phase = PhaseDDL; return r }(), false},
		"a failover-hold":                 {mk(KindFailoverHold, StateActive, recent, recent), false},
		"nil":                             {nil, false},
	} {
		if got := AwaitingConfirmation(tc.rec, now); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}
