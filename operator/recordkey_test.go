package operator

import (
	"context"
	"errors"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shipstream/bloodraven/store/leasestore"
)

// Issue 35 ("also fix"): the record key Secret is never silently replaced
// while records sealed with it remain: a new key would make every lease and
// tombstone hold nothing. At e3e472e LoadRecordKey created a new key.
func TestALostRecordKeyIsRefusedWhileSealedRecordsRemain(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	const name = "bloodraven-lease-record-key"
	if _, err := leasestore.LoadRecordKey(ctx, env.Client, ns, name, ns); err != nil {
		t.Fatalf("first start: %v", err)
	}
	sealed := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "sealed-record", Namespace: ns,
		Labels:      map[string]string{leasestore.LabelDeployLease: "true"},
		Annotations: map[string]string{leasestore.RecordMACAnnotation: "c2VhbGVk"}}}
	if err := env.Client.Create(ctx, sealed); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	_, err := leasestore.LoadRecordKey(ctx, env.Client, ns, name, ns)
	if !errors.Is(err, leasestore.ErrRecordKeyLost) || !strings.Contains(err.Error(), "restore the Secret") {
		t.Fatalf("a lost key with a sealed record left: %v, want ErrRecordKeyLost saying how to recover", err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a new key Secret was written over the sealed records: %v", err)
	}
	// With no sealed record left, a new key is created.
	if err := env.Client.Delete(ctx, sealed); err != nil {
		t.Fatal(err)
	}
	if _, err := leasestore.LoadRecordKey(ctx, env.Client, ns, name, ns); err != nil {
		t.Fatalf("no sealed record left: %v", err)
	}
}
