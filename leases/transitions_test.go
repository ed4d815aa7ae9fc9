package leases

import (
	"testing"
	"time"
)

func TestHoldLivesOnlyWithItsOperationsMutex(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	live, past := now.Add(time.Minute), now.Add(-time.Nanosecond)
	mk := func(kind Kind, op string, state State, exp time.Time) *Record {
		return &Record{GroupUID: "u", Kind: kind, OperationID: op, Instance: "app", State: state, ExpiresAt: exp}
	}
	hold := mk(KindFailoverHold, "a", StateActive, live)
	tests := map[string]struct {
		hold, mig *Record
		want      bool
	}{
		"hold and mutex live, same operation": {hold, mk(KindMigration, "a", StateActive, live), true},
		"mutex expired":                       {hold, mk(KindMigration, "a", StateActive, past), false},
		"mutex released":                      {hold, mk(KindMigration, "a", StateReleased, live), false},
		"mutex revoked":                       {hold, mk(KindMigration, "a", StateRevoked, live), false},
		"mutex held by another operation":     {hold, mk(KindMigration, "b", StateActive, live), false},
		"no mutex":                            {hold, nil, false},
		"hold itself expired":                 {mk(KindFailoverHold, "a", StateActive, past), mk(KindMigration, "a", StateActive, live), false},
		"mutex for another instance": {hold, &Record{GroupUID: "u", Kind: KindMigration, OperationID: "a", Instance: "other",
			State: StateActive, ExpiresAt: live}, false},
	}
	for name, tc := range tests {
		if got := HoldLive(tc.hold, tc.mig, now); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

func TestTransitionsReturnNewValues(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	r := NewGrant(Grant{Group: "g", GroupUID: "u", Kind: KindMigration, OperationID: "a", TTLSeconds: 30}, HashToken("t"), now)
	renewed := r.Renewed(60, now.Add(time.Second))
	if !r.ExpiresAt.Equal(now.Add(30*time.Second)) || !renewed.ExpiresAt.Equal(now.Add(61*time.Second)) || renewed.TTLSeconds != 60 {
		t.Fatalf("grant %v, renewal %v", r.ExpiresAt, renewed.ExpiresAt)
	}
	if r.Released(now).State != StateReleased || r.Expired().State != StateExpired || r.State != StateActive {
		t.Fatal("a transition edited its receiver")
	}
	rev := r.Revoked(ReasonTopologyChanged, now)
	tomb := NewTombstone("g", "u", "a", ReasonTopologyChanged, 2, []Record{r}, now)
	if rev.State != StateRevoked || rev.Reason != ReasonTopologyChanged || tomb.Kind != KindTombstone || len(tomb.RevokedTokenHashes) != 1 {
		t.Fatalf("revoked %+v tombstone %+v", rev, tomb)
	}
}
