package operator

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/scene"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// The operator's clients ask for uncompressed answers, and RESTConfig
// leaves the config it is given alone.
func TestTheOperatorsClientsAskForUncompressedAnswers(t *testing.T) {
	in := &rest.Config{Host: "https://example.invalid", QPS: 7}
	out := RESTConfig(in)
	if !out.DisableCompression {
		t.Error("RESTConfig: compression is still asked for")
	}
	if in.DisableCompression || out == in || out.QPS != 7 || out.Host != in.Host {
		t.Errorf("RESTConfig changed its input or lost a field: in %+v, out host %q qps %v", in, out.Host, out.QPS)
	}
}

// A deployment Lease loses its managed fields at its first update and is
// never tracked again; the operator's cache holds no managed fields of any
// object.
func TestDeploymentLeasesCarryNoManagedFields(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := env.Namespace(t)
	g := scene.Group(ns, "fields")
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	c := startCache(ctx, t, ns)
	st := &leasestore.Store{Client: env.Client, Cached: c, API: env.Client, Clock: clock.RealClock{}}
	now := time.Now().UTC()
	rec := leases.Record{Group: g.Name, GroupUID: string(g.UID), Kind: leases.KindMigration, OperationID: "op-1",
		Instance: "app", Identity: "system:serviceaccount:" + ns + ":deploy", State: leases.StateActive,
		Generation: 1, TTLSeconds: 30, GrantedAt: now, RenewedAt: now, ExpiresAt: now.Add(30 * time.Second)}
	name := leases.MigrationName(g.Name)
	obj, err := st.Create(ctx, g, name, rec)
	if err != nil {
		t.Fatal(err)
	}
	stored := func() *coordinationv1.Lease {
		t.Helper()
		l := &coordinationv1.Lease{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	if len(stored().ManagedFields) == 0 {
		t.Fatal("the API server recorded no managed fields at creation; this test would show nothing")
	}
	for i := range 2 {
		rec = rec.Renewed(30, time.Now().UTC())
		if obj, err = st.Update(ctx, g, obj, rec); err != nil {
			t.Fatal(err)
		}
		if got := stored().ManagedFields; len(got) != 0 {
			t.Fatalf("after update %d the Lease has managed fields %v, want none", i+1, got)
		}
	}
	if got := stored(); got.Spec.RenewTime == nil || !got.Spec.RenewTime.Time.Equal(rec.RenewedAt.Truncate(time.Microsecond)) {
		t.Errorf("the last update was not stored: renewTime %v, want %v", got.Spec.RenewTime, rec.RenewedAt)
	}

	// The cache strips the managed fields of every object it holds.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var cachedGroup bloodravenv1alpha1.MysqlFailoverGroup
		err := c.Get(ctx, client.ObjectKeyFromObject(g), &cachedGroup)
		if err == nil {
			if len(cachedGroup.ManagedFields) != 0 {
				t.Fatalf("the cached group has managed fields %v", cachedGroup.ManagedFields)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the group never reached the cache: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var fresh bloodravenv1alpha1.MysqlFailoverGroup
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), &fresh); err != nil {
		t.Fatal(err)
	}
	if len(fresh.ManagedFields) == 0 {
		t.Error("the API server has no managed fields for the group: the cache check showed nothing")
	}
}

// The deployment API's direct reader answers what controller-runtime's
// reader answers: the same objects, the API server's NotFound, a used
// object emptied first, and every other kind through the next reader.
func TestTheDirectReaderReadsWhatTheAPIReaderReads(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	g := scene.Group(ns, "direct")
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	db := &bloodravenv1alpha1.MysqlDatabase{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: bloodravenv1alpha1.MysqlDatabaseSpec{GroupRef: bloodravenv1alpha1.GroupReference{Name: g.Name}, DatabaseName: "app",
			DeploymentClients: []bloodravenv1alpha1.DeploymentClient{{Namespace: ns, ServiceAccount: "deploy"}}},
	}
	if err := env.Client.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	r, err := newDirectReader(env.Config, hc, env.Client)
	if err != nil {
		t.Fatal(err)
	}

	gotGroup := &bloodravenv1alpha1.MysqlFailoverGroup{}
	if err := r.Get(ctx, client.ObjectKeyFromObject(g), gotGroup); err != nil {
		t.Fatal(err)
	}
	wantGroup := &bloodravenv1alpha1.MysqlFailoverGroup{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(g), wantGroup); err != nil {
		t.Fatal(err)
	}
	gotGroup.TypeMeta, wantGroup.TypeMeta = metav1.TypeMeta{}, metav1.TypeMeta{}
	if !equality.Semantic.DeepEqual(gotGroup, wantGroup) {
		t.Errorf("the direct read of the group differs:\n got %+v\nwant %+v", gotGroup, wantGroup)
	}

	// A used object: nothing of it survives the read.
	gotDB := &bloodravenv1alpha1.MysqlDatabase{}
	gotDB.Labels = map[string]string{"stale": "yes"}
	gotDB.Spec.DeploymentClients = []bloodravenv1alpha1.DeploymentClient{{Namespace: "other", ServiceAccount: "intruder"}, {}, {}}
	if err := r.Get(ctx, client.ObjectKeyFromObject(db), gotDB); err != nil {
		t.Fatal(err)
	}
	if gotDB.Labels["stale"] != "" || len(gotDB.Spec.DeploymentClients) != 1 || gotDB.Spec.DeploymentClients[0].ServiceAccount != "deploy" ||
		gotDB.UID != db.UID || gotDB.ResourceVersion == "" {
		t.Errorf("the direct read of a used object kept stale fields or lost some: %+v", gotDB)
	}

	err = r.Get(ctx, client.ObjectKey{Namespace: ns, Name: "absent"}, &bloodravenv1alpha1.MysqlFailoverGroup{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("an absent group: %v, want NotFound", err)
	}
	err = r.Get(ctx, client.ObjectKey{Namespace: ns, Name: "absent"}, &coordinationv1.Lease{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("another kind goes through the next reader: %v, want its NotFound", err)
	}
}

// countingMapper answers a namespaced mapping for every kind and counts
// the questions.
type countingMapper struct {
	meta.RESTMapper
	asked map[schema.GroupKind]int
	fail  bool
}

func (m *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	m.asked[gk]++
	if m.fail {
		return nil, &meta.NoKindMatchError{GroupKind: gk}
	}
	return &meta.RESTMapping{GroupVersionKind: gk.WithVersion("v1"), Scope: meta.RESTScopeNamespace}, nil
}

// The mapper remembers the answers for the operator's fixed kinds only,
// and never a failure.
func TestTheMapperRemembersOnlyFixedKindsItFound(t *testing.T) {
	lease := coordinationv1.SchemeGroupVersion.WithKind("Lease").GroupKind()
	other := schema.GroupKind{Group: "example.com", Kind: "Widget"}
	inner := &countingMapper{asked: map[schema.GroupKind]int{}, fail: true}
	m := &fixedScopeMapper{RESTMapper: inner}
	for range 2 {
		if _, err := m.RESTMapping(lease); err == nil {
			t.Fatal("a failure was answered as a mapping")
		}
	}
	inner.fail = false
	for range 3 {
		for _, gk := range []schema.GroupKind{lease, other} {
			got, err := m.RESTMapping(gk)
			if err != nil || got.Scope.Name() != meta.RESTScopeNameNamespace || got.GroupVersionKind.GroupKind() != gk {
				t.Fatalf("%v: %+v, %v", gk, got, err)
			}
			got.Scope = meta.RESTScopeRoot // a caller's change stays its own
		}
	}
	if inner.asked[lease] != 3 || inner.asked[other] != 3 {
		t.Errorf("the wrapped mapper was asked %d times for the Lease (want 3: two failures, one answer) and %d for another kind (want 3: every time)",
			inner.asked[lease], inner.asked[other])
	}
}
