package leasestore

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
)

func TestEncodeProjectsDurationAndOwnsByGroup(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	group := &bloodravenv1alpha1.MysqlFailoverGroup{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "db", UID: "uid-1"}}
	tests := map[string]struct {
		state leases.State
		ttl   int64
		want  int32
	}{
		"active carries its ttl":               {state: leases.StateActive, ttl: 30, want: 30},
		"active with a tiny ttl is at least 1": {state: leases.StateActive, ttl: 0, want: 1},
		"released projects to the minimum":     {state: leases.StateReleased, ttl: 30, want: 1},
		"expired projects to the minimum":      {state: leases.StateExpired, ttl: 30, want: 1},
		"revoked projects to the minimum":      {state: leases.StateRevoked, ttl: 120, want: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rec := &leases.Record{Group: "orders", Kind: leases.KindMigration, OperationID: "op-1", State: tc.state, TTLSeconds: tc.ttl,
				ExpiresAt: now.Add(30 * time.Second), GrantedAt: now, RenewedAt: now, TokenHash: leases.HashToken("secret")}
			l := &coordinationv1.Lease{}
			if err := Encode(l, rec, group); err != nil {
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
