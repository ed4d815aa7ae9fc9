package policy

import (
	"testing"
	"time"

	"github.com/shipstream/bloodraven/leases"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func rec(op string, state leases.State, gen int64, expires time.Time) *leases.Record {
	return &leases.Record{GroupUID: uid, Kind: leases.KindMigration, OperationID: op, Instance: "counter-app", Identity: "system:serviceaccount:app:deploy",
		State: state, Generation: gen, ExpiresAt: expires, TokenHash: leases.HashToken("tok-" + op)}
}

func phased(r *leases.Record, p leases.Phase) *leases.Record { r.Phase = p; return r }

func ddl(r *leases.Record) *leases.Record { return phased(r, leases.PhaseDDL) }

func TestDecideGrant(t *testing.T) {
	live := t0.Add(10 * time.Second)
	past := t0.Add(-time.Second)
	g := GroupView{UID: uid, Generation: 7}
	tests := map[string]struct {
		in   GrantInput
		want LeaseOutcome
	}{
		"first migration creates the mutex": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "a", Group: g}, want: OutcomeCreate},
		"migration held by another operation": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "b", Group: g, Migration: rec("a", leases.StateActive, 7, live)}, want: OutcomeHeld},
		"same operation re-grants": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "a", Instance: "counter-app", Identity: "system:serviceaccount:app:deploy", Group: g, Migration: rec("a", leases.StateActive, 7, live)}, want: OutcomeRegrant},
		"same operation from another identity is held": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "a", Instance: "counter-app", Identity: "system:serviceaccount:other:deploy", Group: g, Migration: rec("a", leases.StateActive, 7, live)}, want: OutcomeHeld},
		"same operation for another instance is held": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "a", Instance: "other-app", Identity: "system:serviceaccount:app:deploy", Group: g, Migration: rec("a", leases.StateActive, 7, live)}, want: OutcomeHeld},
		"a mutex left by a deleted group of the same name is taken over": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "b", Group: g, Migration: &leases.Record{GroupUID: "old-uid", OperationID: "a", State: leases.StateActive, Generation: 7, ExpiresAt: live}}, want: OutcomeTakeOver},
		"a revoked mutex of a deleted group of the same name does not revoke the operation": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "a", Group: g, Migration: &leases.Record{GroupUID: "old-uid", OperationID: "a", State: leases.StateRevoked, ExpiresAt: live}}, want: OutcomeTakeOver},
		"an expired holder is taken over": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "b", Group: g, Migration: rec("a", leases.StateActive, 7, past)}, want: OutcomeTakeOver},
		"expiry is now > expiresAt: at expiresAt it still holds": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "b", Group: g, Migration: rec("a", leases.StateActive, 7, t0)}, want: OutcomeHeld},
		"a released mutex is taken over": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "b", Group: g, Migration: rec("a", leases.StateReleased, 7, live)}, want: OutcomeTakeOver},
		"another operation's revoked mutex is taken over": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "b", Group: g, Migration: rec("a", leases.StateRevoked, 6, live)}, want: OutcomeTakeOver},
		"a tombstoned operation is revoked even when the mutex is free": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "a", Group: g, Tombstone: &leases.Record{Reason: leases.ReasonOperatorRevoked}}, want: OutcomeRevoked},
		"a tombstoned operation is revoked after another took the mutex": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "a", Group: g, Tombstone: &leases.Record{Reason: leases.ReasonTopologyChanged}, Migration: rec("b", leases.StateActive, 7, live)}, want: OutcomeRevoked},
		"own revoked mutex record is revoked without a tombstone read": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "a", Group: g, Migration: rec("a", leases.StateRevoked, 6, live)}, want: OutcomeRevoked},
		"a live holder of an older generation is revoked first": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "b", Group: g, Migration: rec("a", leases.StateActive, 6, live)}, want: OutcomeRevokeStale},
		// Issue 35, item 5: a fenced record that may be a grant in flight
		// is neither revoked nor taken over until its window ends.
		"a fenced record that may be a grant in flight answers 423": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "b", Group: g,
				Migration: grantedAt(rec("a", leases.StateActive, 6, live), t0.Add(-time.Second))}, want: OutcomeGrantInFlight},
		"the operation's own request fences its record at once": {
			in: GrantInput{Kind: leases.KindFailoverHold, OperationID: "a", Instance: "counter-app", Identity: "system:serviceaccount:app:deploy", Group: g,
				Migration: grantedAt(rec("a", leases.StateActive, 6, live), t0.Add(-time.Second))}, want: OutcomeRevokeStale},
		"a fenced record past the window is revoked first": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "b", Group: g,
				Migration: grantedAt(rec("a", leases.StateActive, 6, live), t0.Add(-leases.ConfirmWindow))}, want: OutcomeRevokeStale},
		"a grant during an unconfirmed transition is unstable": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "a", Group: GroupView{UID: uid, Generation: 7, Transition: true}}, want: OutcomeUnstable},
		"held beats unstable": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "b", Group: GroupView{UID: uid, Generation: 7, Transition: true}, Migration: rec("a", leases.StateActive, 7, live)}, want: OutcomeHeld},
		"a reservation does not block a migration grant": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "a", Group: GroupView{UID: uid, Generation: 7, Reservation: true}}, want: OutcomeCreate},
		"hold for the migration holder is created": {
			in: GrantInput{Kind: leases.KindFailoverHold, OperationID: "a", Instance: "counter-app", Identity: "system:serviceaccount:app:deploy", Group: g, Migration: rec("a", leases.StateActive, 7, live)}, want: OutcomeCreate},
		"hold re-grant for the holder": {
			in: GrantInput{Kind: leases.KindFailoverHold, OperationID: "a", Instance: "counter-app", Identity: "system:serviceaccount:app:deploy", Group: g, Migration: rec("a", leases.StateActive, 7, live), Hold: rec("a", leases.StateActive, 7, live)}, want: OutcomeRegrant},
		"hold after a released hold is a new grant": {
			in: GrantInput{Kind: leases.KindFailoverHold, OperationID: "a", Instance: "counter-app", Identity: "system:serviceaccount:app:deploy", Group: g, Migration: rec("a", leases.StateActive, 7, live), Hold: rec("a", leases.StateReleased, 7, live)}, want: OutcomeTakeOver},
		"a spent deferral budget refuses a hold grant": {
			in: GrantInput{Kind: leases.KindFailoverHold, OperationID: "a", Instance: "counter-app", Identity: "system:serviceaccount:app:deploy", Group: GroupView{UID: uid, Generation: 7, DeferralBudgetSpent: true}, Migration: rec("a", leases.StateActive, 7, live)}, want: OutcomeDeferralBudgetExhausted},
		"a spent deferral budget comes after 403 migration_not_held": {
			in: GrantInput{Kind: leases.KindFailoverHold, OperationID: "b", Instance: "counter-app", Identity: "system:serviceaccount:app:deploy", Group: GroupView{UID: uid, Generation: 7, DeferralBudgetSpent: true}, Migration: rec("a", leases.StateActive, 7, live)}, want: OutcomeMigrationNotHeld},
		"a spent deferral budget comes before 423": {
			in: GrantInput{Kind: leases.KindFailoverHold, OperationID: "a", Instance: "counter-app", Identity: "system:serviceaccount:app:deploy", Group: GroupView{UID: uid, Generation: 7, DeferralBudgetSpent: true, Reservation: true}, Migration: rec("a", leases.StateActive, 7, live)}, want: OutcomeDeferralBudgetExhausted},
		"a hold revoked by the budget answers revoked": {
			in: GrantInput{Kind: leases.KindFailoverHold, OperationID: "a", Instance: "counter-app", Identity: "system:serviceaccount:app:deploy", Group: GroupView{UID: uid, Generation: 7, DeferralBudgetSpent: true}, Migration: rec("a", leases.StateActive, 7, live), Hold: rec("a", leases.StateRevoked, 7, live)}, want: OutcomeRevoked},
		"a spent deferral budget does not refuse the migration mutex": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "a", Group: GroupView{UID: uid, Generation: 7, DeferralBudgetSpent: true}}, want: OutcomeCreate},
		"an ended operation's unconfirmed DDL is recorded before its mutex is taken over": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "b", Group: g, Migration: ddl(rec("a", leases.StateReleased, 7, live))}, want: OutcomeCloseGate},
		"an expired operation's unconfirmed DDL is recorded too": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "b", Group: g, Migration: ddl(rec("a", leases.StateActive, 7, past))}, want: OutcomeCloseGate},
		"a revoked operation's unconfirmed DDL is recorded too": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "b", Group: g, Migration: ddl(rec("a", leases.StateRevoked, 7, live))}, want: OutcomeCloseGate},
		"a recorded unconfirmed DDL of another instance lets the mutex be taken over": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "b", Instance: "other-app", Group: g, Migration: ddl(rec("a", leases.StateReleased, 7, live)),
				Verification: VerificationView{MigrationRecorded: true}}, want: OutcomeTakeOver},
		"a closed gate refuses a migration grant for its instance": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "b", Instance: "counter-app", Group: g, Migration: ddl(rec("a", leases.StateReleased, 7, live)),
				Verification: VerificationView{MigrationRecorded: true, Pending: rec("a", "", 7, t0)}}, want: OutcomeVerificationRequired},
		"a closed gate refuses even with the mutex free": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "b", Group: g, Verification: VerificationView{Pending: rec("a", "", 7, t0)}}, want: OutcomeVerificationRequired},
		"a closed gate comes before mutex_held": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "b", Group: g, Migration: rec("c", leases.StateActive, 7, live), Verification: VerificationView{Pending: rec("a", "", 7, t0)}}, want: OutcomeVerificationRequired},
		"a closed gate comes before 423": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "b", Group: GroupView{UID: uid, Generation: 7, Transition: true}, Verification: VerificationView{Pending: rec("a", "", 7, t0)}}, want: OutcomeVerificationRequired},
		"a re-grant of an operation whose record says ddl is refused": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "a", Instance: "counter-app", Identity: "system:serviceaccount:app:deploy", Group: g, Migration: ddl(rec("a", leases.StateActive, 7, live))}, want: OutcomeVerificationRequired},
		"a re-grant of an operation whose record says done is a re-grant": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "a", Instance: "counter-app", Identity: "system:serviceaccount:app:deploy", Group: g, Migration: phased(rec("a", leases.StateActive, 7, live), leases.PhaseDone)}, want: OutcomeRegrant},
		"an operation that confirmed its end is not gated when it ends": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "b", Group: g, Migration: phased(rec("a", leases.StateReleased, 7, live), leases.PhaseDone)}, want: OutcomeTakeOver},
		"an operation that ended before its DDL boundary is not gated": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "b", Group: g, Migration: phased(rec("a", leases.StateRevoked, 7, live), leases.PhasePreDDL)}, want: OutcomeTakeOver},
		"a hold grant reads no gate": {
			in: GrantInput{Kind: leases.KindFailoverHold, OperationID: "a", Instance: "counter-app", Identity: "system:serviceaccount:app:deploy", Group: g, Migration: ddl(rec("a", leases.StateActive, 7, live)),
				Verification: VerificationView{Pending: rec("z", "", 7, t0)}}, want: OutcomeCreate},
		"a tombstone comes before the gate": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "a", Group: g, Tombstone: &leases.Record{Reason: leases.ReasonTopologyChanged}, Verification: VerificationView{Pending: rec("a", "", 7, t0)}}, want: OutcomeRevoked},
		"a live DDL fenced by the move is revoked before the gate is recorded": {
			in: GrantInput{Kind: leases.KindMigration, OperationID: "b", Group: GroupView{UID: uid, Generation: 8, MovedAt: t0}, Migration: ddl(rec("a", leases.StateActive, 7, live))}, want: OutcomeRevokeStale},
		"hold without any migration": {
			in: GrantInput{Kind: leases.KindFailoverHold, OperationID: "a", Group: g}, want: OutcomeMigrationNotHeld},
		"hold by another operation": {
			in: GrantInput{Kind: leases.KindFailoverHold, OperationID: "b", Instance: "counter-app", Identity: "system:serviceaccount:app:deploy", Group: g, Migration: rec("a", leases.StateActive, 7, live)}, want: OutcomeMigrationNotHeld},
		"hold for another instance": {
			in: GrantInput{Kind: leases.KindFailoverHold, OperationID: "a", Instance: "other", Identity: "system:serviceaccount:app:deploy", Group: g, Migration: rec("a", leases.StateActive, 7, live)}, want: OutcomeMigrationNotHeld},
		"hold after the migration expired": {
			in: GrantInput{Kind: leases.KindFailoverHold, OperationID: "a", Instance: "counter-app", Identity: "system:serviceaccount:app:deploy", Group: g, Migration: rec("a", leases.StateActive, 7, past)}, want: OutcomeMigrationNotHeld},
		"hold for a revoked operation is revoked": {
			in: GrantInput{Kind: leases.KindFailoverHold, OperationID: "a", Group: g, Tombstone: &leases.Record{Reason: leases.ReasonTopologyChanged}}, want: OutcomeRevoked},
		"hold during a reservation is unstable": {
			in: GrantInput{Kind: leases.KindFailoverHold, OperationID: "a", Instance: "counter-app", Identity: "system:serviceaccount:app:deploy", Group: GroupView{UID: uid, Generation: 7, Reservation: true}, Migration: rec("a", leases.StateActive, 7, live)}, want: OutcomeUnstable},
		"not-held beats unstable": {
			in: GrantInput{Kind: leases.KindFailoverHold, OperationID: "b", Group: GroupView{UID: uid, Generation: 7, Reservation: true}, Migration: rec("a", leases.StateActive, 7, live)}, want: OutcomeMigrationNotHeld},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tc.in.Now = t0
			d := DecideGrant(tc.in)
			if d.Outcome != tc.want {
				t.Fatalf("outcome = %d, want %d", d.Outcome, tc.want)
			}
			if d.Outcome == OutcomeHeld && d.Holder != tc.in.Migration {
				t.Fatal("held without the holder")
			}
			if d.Outcome == OutcomeRevokeStale && d.RevokeOperation != tc.in.Migration.OperationID {
				t.Fatalf("revoke %q, want the stale holder %q", d.RevokeOperation, tc.in.Migration.OperationID)
			}
		})
	}
}

func TestDecideRenew(t *testing.T) {
	live := t0.Add(10 * time.Second)
	g := GroupView{UID: uid, Generation: 7}
	tests := map[string]struct {
		in         RenewInput
		want       LeaseOutcome
		wantReason string
	}{
		"renews a live lease with its token": {
			in: RenewInput{Kind: leases.KindMigration, OperationID: "a", Token: "tok-a", Group: g, Record: rec("a", leases.StateActive, 7, live)}, want: OutcomeRenew},
		"wrong token": {
			in: RenewInput{Kind: leases.KindMigration, OperationID: "a", Token: "tok-b", Group: g, Record: rec("a", leases.StateActive, 7, live)}, want: OutcomeTokenMismatch},
		"empty token": {
			in: RenewInput{Kind: leases.KindMigration, OperationID: "a", Group: g, Record: rec("a", leases.StateActive, 7, live)}, want: OutcomeTokenMismatch},
		"unknown lease": {
			in: RenewInput{Kind: leases.KindMigration, OperationID: "a", Token: "tok-a", Group: g}, want: OutcomeNotFound},
		"expired lease": {
			in: RenewInput{Kind: leases.KindMigration, OperationID: "a", Token: "tok-a", Group: g, Record: rec("a", leases.StateActive, 7, t0.Add(-time.Nanosecond))}, want: OutcomeNotFound},
		"released lease": {
			in: RenewInput{Kind: leases.KindFailoverHold, OperationID: "a", Token: "tok-a", Group: g, Record: rec("a", leases.StateReleased, 7, live), Migration: rec("a", leases.StateActive, 7, live)}, want: OutcomeNotFound},
		"a hold renews while its operation holds the live mutex": {
			in: RenewInput{Kind: leases.KindFailoverHold, OperationID: "a", Token: "tok-a", Group: g, Record: rec("a", leases.StateActive, 7, live), Migration: rec("a", leases.StateActive, 7, live)}, want: OutcomeRenew},
		"a hold whose operation lost the mutex to another is not found": {
			in: RenewInput{Kind: leases.KindFailoverHold, OperationID: "a", Token: "tok-a", Group: g, Record: rec("a", leases.StateActive, 7, live), Migration: rec("b", leases.StateActive, 7, live)}, want: OutcomeNotFound},
		"a hold whose mutex expired is not found": {
			in: RenewInput{Kind: leases.KindFailoverHold, OperationID: "a", Token: "tok-a", Group: g, Record: rec("a", leases.StateActive, 7, live), Migration: rec("a", leases.StateActive, 7, t0.Add(-time.Nanosecond))}, want: OutcomeNotFound},
		"a hold whose mutex was released is not found": {
			in: RenewInput{Kind: leases.KindFailoverHold, OperationID: "a", Token: "tok-a", Group: g, Record: rec("a", leases.StateActive, 7, live), Migration: rec("a", leases.StateReleased, 7, live)}, want: OutcomeNotFound},
		"a hold without a mutex is not found": {
			in: RenewInput{Kind: leases.KindFailoverHold, OperationID: "a", Token: "tok-a", Group: g, Record: rec("a", leases.StateActive, 7, live)}, want: OutcomeNotFound},
		"revoked lease": {
			in:   RenewInput{Kind: leases.KindMigration, OperationID: "a", Token: "tok-a", Group: g, Record: &leases.Record{OperationID: "a", State: leases.StateRevoked, Reason: leases.ReasonOperatorRevoked}},
			want: OutcomeRevoked, wantReason: leases.ReasonOperatorRevoked},
		"tombstoned after another took the mutex": {
			in:   RenewInput{Kind: leases.KindMigration, OperationID: "a", Token: "tok-a", Group: g, Tombstone: &leases.Record{Reason: leases.ReasonTopologyChanged}},
			want: OutcomeRevoked, wantReason: leases.ReasonTopologyChanged},
		"generation moved: a never-renewed record's own token is fenced at once": {
			in: RenewInput{Kind: leases.KindMigration, OperationID: "a", Token: "tok-a", Group: GroupView{UID: uid, Generation: 8},
				Record: grantedAt(rec("a", leases.StateActive, 7, live), t0)}, want: OutcomeRevokeStale},
		"generation moved: revoke": {
			in: RenewInput{Kind: leases.KindMigration, OperationID: "a", Token: "tok-a", Group: GroupView{UID: uid, Generation: 8}, Record: rec("a", leases.StateActive, 7, live)}, want: OutcomeRevokeStale},
		"transition: unstable, not renewed": {
			in: RenewInput{Kind: leases.KindMigration, OperationID: "a", Token: "tok-a", Group: GroupView{UID: uid, Generation: 7, Transition: true}, Record: rec("a", leases.StateActive, 7, live)}, want: OutcomeUnstable},
		"reservation: hold renewal is unstable": {
			in: RenewInput{Kind: leases.KindFailoverHold, OperationID: "a", Token: "tok-a", Group: GroupView{UID: uid, Generation: 7, Reservation: true}, Record: rec("a", leases.StateActive, 7, live), Migration: rec("a", leases.StateActive, 7, live)}, want: OutcomeUnstable},
		"reservation: migration renewal goes through": {
			in: RenewInput{Kind: leases.KindMigration, OperationID: "a", Token: "tok-a", Group: GroupView{UID: uid, Generation: 7, Reservation: true}, Record: rec("a", leases.StateActive, 7, live)}, want: OutcomeRenew},
		"a wrong token during a transition is still a mismatch": {
			in: RenewInput{Kind: leases.KindMigration, OperationID: "a", Token: "nope", Group: GroupView{UID: uid, Generation: 7, Transition: true}, Record: rec("a", leases.StateActive, 7, live)}, want: OutcomeTokenMismatch},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tc.in.Now = t0
			d := DecideRenew(tc.in)
			if d.Outcome != tc.want || d.Reason != tc.wantReason {
				t.Fatalf("decision = %+v, want outcome %d reason %q", d, tc.want, tc.wantReason)
			}
		})
	}
}

func TestDecideRelease(t *testing.T) {
	live := t0.Add(time.Second)
	tests := map[string]struct {
		record *leases.Record
		token  string
		want   LeaseOutcome
	}{
		"absent is idempotent":          {want: OutcomeNothingToRelease},
		"expired is idempotent":         {record: rec("a", leases.StateActive, 7, t0.Add(-time.Second)), want: OutcomeNothingToRelease},
		"revoked is idempotent":         {record: rec("a", leases.StateRevoked, 7, live), want: OutcomeNothingToRelease},
		"released twice is idempotent":  {record: rec("a", leases.StateReleased, 7, live), token: "tok-a", want: OutcomeNothingToRelease},
		"live with its token":           {record: rec("a", leases.StateActive, 7, live), token: "tok-a", want: OutcomeRelease},
		"live without a token":          {record: rec("a", leases.StateActive, 7, live), want: OutcomeTokenMismatch},
		"live with another lease token": {record: rec("a", leases.StateActive, 7, live), token: "tok-b", want: OutcomeTokenMismatch},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if d := DecideRelease(tc.record, tc.token, GroupView{UID: uid, Generation: 7}, t0); d.Outcome != tc.want {
				t.Fatalf("outcome = %d, want %d", d.Outcome, tc.want)
			}
		})
	}
}

func TestGrantOvertaken(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind leases.Kind
		gen  int64
		g    GroupView
		want bool
	}{
		{"a migration at the current generation stands", leases.KindMigration, 3, GroupView{Generation: 3}, false},
		{"a hold at the current generation stands", leases.KindFailoverHold, 3, GroupView{Generation: 3}, false},
		{"a migration whose group moved meanwhile is withdrawn", leases.KindMigration, 3, GroupView{Generation: 4}, true},
		{"a hold whose group moved meanwhile is withdrawn", leases.KindFailoverHold, 3, GroupView{Generation: 4}, true},
		{"a migration beside a reservation stands", leases.KindMigration, 3, GroupView{Generation: 3, Reservation: true}, false},
		{"a hold beside a reservation is withdrawn", leases.KindFailoverHold, 3, GroupView{Generation: 3, Reservation: true}, true},
		{"a migration beside a transition is withdrawn", leases.KindMigration, 3, GroupView{Generation: 3, Transition: true}, true},
		{"a hold beside a transition is withdrawn", leases.KindFailoverHold, 3, GroupView{Generation: 3, Transition: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := GrantOvertaken(tc.kind, tc.gen, tc.g); got != tc.want {
				t.Fatalf("GrantOvertaken = %v, want %v", got, tc.want)
			}
		})
	}
}
