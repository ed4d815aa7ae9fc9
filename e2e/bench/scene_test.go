package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/deployapi"
	"github.com/shipstream/bloodraven/internal/operatortest"
)

// scene is the operator and the objects the cells use.
type scene struct {
	t *testing.T
	o *operatortest.Operator
	// cfg is a copy of the admin config that the client does not throttle.
	cfg *rest.Config
	// groups[i] is worker i's group (and the revocation's lease i).
	groups []*bloodravenv1alpha1.MysqlFailoverGroup
	deploy *deployClient
	// setupToken grants and releases; workers renew with their own tokens.
	setupToken string
}

func groupName(i int) string { return fmt.Sprintf("bench-%03d", i) }

// dbName is the MysqlDatabase of group i, the instance of its leases.
func dbName(i int) string { return groupName(i) + "-app" }

func newScene(t *testing.T) *scene {
	// Every worker is the one deploy ServiceAccount: its fair share is set
	// above what the bench drives, so the limiter runs on every request and
	// never refuses one (the renewal ratios are measured with it on).
	return sceneFor(t, operatortest.Start(t, env, operatortest.Options{Quiet: true, FairShare: benchFairShare}))
}

// sceneFor is the scene of an operator already started.
func sceneFor(t *testing.T, o *operatortest.Operator) *scene {
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 5000, 10000
	d, err := newDeployClient(o.URL, o.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	s := &scene{t: t, o: o, cfg: cfg, deploy: d}
	s.setupToken, _ = o.Token()
	return s
}

// addGroups creates groups (each with one MysqlDatabase naming the deploy
// ServiceAccount) until there are n, seeds them in the simulated data plane
// and waits for their bootstrap (topologyGeneration 1).
func (s *scene) addGroups(ctx context.Context, n, workers int) error {
	from := len(s.groups)
	if n <= from {
		return nil
	}
	fresh := make([]*bloodravenv1alpha1.MysqlFailoverGroup, n-from)
	err := parallel(n-from, workers, func(_, k int) error {
		i := from + k
		g := &bloodravenv1alpha1.MysqlFailoverGroup{
			ObjectMeta: metav1.ObjectMeta{Name: groupName(i), Namespace: s.o.Namespace},
			Spec: bloodravenv1alpha1.MysqlFailoverGroupSpec{Sites: []bloodravenv1alpha1.Site{{Name: "iad"}, {Name: "pdx"}},
				FailureDetectionSeconds: 5},
		}
		if err := env.Client.Create(ctx, g); err != nil {
			return fmt.Errorf("create group %s: %w", g.Name, err)
		}
		// Seeded before its first probe, as operatortest.Start does: the
		// group bootstraps with iad primary.
		s.o.Driver.Seed(g, "iad")
		fresh[k] = g
		db := &bloodravenv1alpha1.MysqlDatabase{
			ObjectMeta: metav1.ObjectMeta{Name: dbName(i), Namespace: s.o.Namespace},
			Spec: bloodravenv1alpha1.MysqlDatabaseSpec{GroupRef: bloodravenv1alpha1.GroupReference{Name: g.Name}, DatabaseName: "app",
				DeploymentClients: []bloodravenv1alpha1.DeploymentClient{{Namespace: s.o.ClientNamespace, ServiceAccount: operatortest.ServiceAccount}}},
		}
		if err := env.Client.Create(ctx, db); err != nil {
			return fmt.Errorf("create database %s: %w", db.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.groups = append(s.groups, fresh...)
	return s.waitGenerations(ctx, func(i int) int64 { return 1 }, time.Minute+time.Duration(n)*200*time.Millisecond)
}

// waitGenerations waits until every group i has a topologyGeneration of at
// least want(i), and refreshes s.groups.
func (s *scene) waitGenerations(ctx context.Context, want func(i int) int64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var list bloodravenv1alpha1.MysqlFailoverGroupList
		if err := env.Client.List(ctx, &list, client.InNamespace(s.o.Namespace)); err != nil {
			return fmt.Errorf("list groups: %w", err)
		}
		byName := map[string]*bloodravenv1alpha1.MysqlFailoverGroup{}
		for i := range list.Items {
			byName[list.Items[i].Name] = &list.Items[i]
		}
		behind := 0
		for i := range s.groups {
			g := byName[groupName(i)]
			if g == nil || g.Status.TopologyGeneration < want(i) {
				behind++
				continue
			}
			s.groups[i] = g
		}
		if behind == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d groups did not reach their topology generation within %s", behind, len(s.groups), timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// addUnrelatedDatabases creates n MysqlDatabases spread over fresh
// namespaces, naming groups that do not exist and a client that is not the
// bench's: nothing the deployment API may use, everything a scan would meet.
func (s *scene) addUnrelatedDatabases(ctx context.Context, n, namespaces, workers int) error {
	nss := make([]string, namespaces)
	for k := range nss {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-unrelated-"}}
		if err := env.Client.Create(ctx, ns); err != nil {
			return fmt.Errorf("create namespace: %w", err)
		}
		nss[k] = ns.Name
	}
	return parallel(n, workers, func(_, i int) error {
		ns := nss[i%len(nss)]
		db := &bloodravenv1alpha1.MysqlDatabase{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("unrelated-%05d", i), Namespace: ns},
			Spec: bloodravenv1alpha1.MysqlDatabaseSpec{GroupRef: bloodravenv1alpha1.GroupReference{Name: fmt.Sprintf("ghost-%03d", i%100)},
				DatabaseName:      fmt.Sprintf("db%05d", i),
				DeploymentClients: []bloodravenv1alpha1.DeploymentClient{{Namespace: ns, ServiceAccount: "app"}}},
		}
		if err := env.Client.Create(ctx, db); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create database %s/%s: %w", ns, db.Name, err)
		}
		return nil
	})
}

// tokens mints n fresh ServiceAccount tokens of the deploy ServiceAccount.
// operatortest's Token fails the test on error, so it runs on the test's
// goroutine.
func (s *scene) tokens(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i], _ = s.o.Token()
	}
	return out
}

// parallel runs f(worker, i) for i in [0, n) on workers goroutines and
// returns the first error; after an error no new i is started.
func parallel(n, workers int, f func(worker, i int) error) error {
	var (
		next   atomic.Int64
		failed atomic.Bool
		once   sync.Once
		first  error
		wg     sync.WaitGroup
	)
	for w := 0; w < min(workers, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(w, i); err != nil {
					failed.Store(true)
					once.Do(func() { first = err })
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// benchFairShare are per-identity limits no bench cell reaches.
var benchFairShare = deployapi.FairShare{Rate: 1e6, Burst: 1e6, InFlight: 1 << 12, HeldGets: 1 << 12, Reads: 1 << 12}
