package leases

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

func TestEncodeProjectsDurationAndOwnsByGroup(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	group := &v1.MysqlFailoverGroup{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "db", UID: "uid-1"}}
	tests := map[string]struct {
		state State
		ttl   int64
		want  int32
	}{
		"active carries its ttl":               {state: StateActive, ttl: 30, want: 30},
		"active with a tiny ttl is at least 1": {state: StateActive, ttl: 0, want: 1},
		"released projects to the minimum":     {state: StateReleased, ttl: 30, want: 1},
		"expired projects to the minimum":      {state: StateExpired, ttl: 30, want: 1},
		"revoked projects to the minimum":      {state: StateRevoked, ttl: 120, want: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rec := &Record{Group: "orders", Kind: KindMigration, OperationID: "op-1", State: tc.state, TTLSeconds: tc.ttl,
				ExpiresAt: now.Add(30 * time.Second), GrantedAt: now, RenewedAt: now, TokenHash: HashToken("secret")}
			l := &coordinationv1.Lease{}
			if err := Encode(l, rec, group, string(KindMigration)); err != nil {
				t.Fatal(err)
			}
			if got := *l.Spec.LeaseDurationSeconds; got != tc.want {
				t.Fatalf("leaseDurationSeconds = %d, want %d", got, tc.want)
			}
			if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != "uid-1" {
				t.Fatalf("owner = %+v", l.OwnerReferences)
			}
			if *l.Spec.HolderIdentity != "op-1" {
				t.Fatalf("holder = %q", *l.Spec.HolderIdentity)
			}
			if strings.Contains(l.Annotations[RecordAnnotation], "secret") {
				t.Fatal("the record holds the token")
			}
			back, err := Decode(l)
			if err != nil || !back.ExpiresAt.Equal(rec.ExpiresAt) || back.State != tc.state || back.TokenHash != rec.TokenHash {
				t.Fatalf("round trip: %+v, %v", back, err)
			}
		})
	}
}

func TestTokenMatches(t *testing.T) {
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != 43 { // 32 bytes, base64url without padding
		t.Fatalf("token length %d", len(tok))
	}
	h := HashToken(tok)
	tests := map[string]struct {
		token, hash string
		want        bool
	}{
		"its own hash":  {tok, h, true},
		"another token": {tok + "x", h, false},
		"empty token":   {"", h, false},
		"empty hash":    {tok, "", false},
	}
	for name, tc := range tests {
		if got := TokenMatches(tc.token, tc.hash); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

func TestNamesAreValidForLongGroups(t *testing.T) {
	long := strings.Repeat("g", 253)
	for _, n := range []string{MigrationName(long), HoldName(long, "op"), TombstoneName(long, "op"), MigrationName("orders")} {
		if len(n) > 253 {
			t.Errorf("name %q is too long", n)
		}
	}
	if MigrationName("orders") != "bloodraven-migration-orders" {
		t.Errorf("short names stay readable: %s", MigrationName("orders"))
	}
	if GroupLabelValue(long) == long {
		t.Error("a group name too long for a label value is used as one")
	}
}
