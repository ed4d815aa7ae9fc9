package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/devenv"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
	"github.com/shipstream/bloodraven/topology"
	mysqldriver "github.com/shipstream/bloodraven/topology/mysql"
)

// Killing the primary's mariadbd leads, after the detection budget, to an
// emergency promotion by the operator; the returning old primary is fenced
// read-only, then re-pointed at the new primary.
func TestEmergencyFailoverOfRealMariaDB(t *testing.T) {
	ctx := context.Background()
	p, _ := upPlayground(t)
	admin, err := client.New(p.AdminConfig, client.Options{Scheme: bloodravenscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: devenv.PlaygroundNamespace, Name: devenv.GroupName}
	g := &v1.MysqlFailoverGroup{}
	waitFor(t, 30*time.Second, func() bool { _ = admin.Get(ctx, key, g); return g.Status.TopologyGeneration == 1 })
	patch := client.MergeFrom(g.DeepCopy())
	g.Spec.FailureDetectionSeconds = 5
	if err := admin.Patch(ctx, g, patch); err != nil { // a merge patch: the operator writes the group too
		t.Fatal(err)
	}
	// An independent observer of the sites, with the playground's account.
	probe := mysqldriver.New(func(context.Context, *v1.MysqlFailoverGroup) (string, string, error) {
		return devenv.MySQLUser, devenv.MySQLPassword, nil
	})
	defer probe.Close()
	site := func(name string) topology.SiteState {
		states, _ := probe.Probe(ctx, g)
		for _, s := range states {
			if s.Name == name {
				return s
			}
		}
		return topology.SiteState{}
	}

	// Kill the primary once pdx has everything it wrote (asynchronous
	// replication: a crash before that leaves errant transactions on iad,
	// which the operator rightly refuses to rejoin; the driver test covers it).
	waitFor(t, 30*time.Second, func() bool {
		gtids, _ := probe.GTIDs(ctx, g)
		return gtids["iad"] != "" && gtids["iad"] == gtids["pdx"]
	})
	p.Sites[0].Kill() // iad, the primary
	killed := time.Now()
	waitFor(t, 60*time.Second, func() bool {
		_ = admin.Get(ctx, key, g)
		return g.Status.ActiveSite == "pdx" && g.Status.TopologyGeneration == 2
	})
	t.Logf("pdx promoted %v after iad was killed (detection budget 5 s, probe interval 2 s)", time.Since(killed).Round(100*time.Millisecond))
	if s := site("pdx"); !s.Writable {
		t.Fatalf("pdx after its promotion: %+v", s)
	}

	// The old primary comes back writable, as a restarted server does; it
	// must end fenced and replicating from pdx.
	if err := p.Sites[0].Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, func() bool { s := site("iad"); return s.Reachable && !s.Writable && s.ReplicationRunning })
	if err := admin.Get(ctx, key, g); err != nil || g.Status.ActiveSite != "pdx" || g.Status.TopologyGeneration != 2 {
		t.Fatalf("the returning primary moved the fence: %s/%d (%v)", g.Status.ActiveSite, g.Status.TopologyGeneration, err)
	}
	var events corev1.EventList
	if err := admin.List(ctx, &events, client.InNamespace(devenv.PlaygroundNamespace)); err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range events.Items {
		reasons = append(reasons, e.Reason)
	}
	if !slices.Contains(reasons, "EmergencyFailover") || !slices.Contains(reasons, "SiteFenced") {
		t.Fatalf("events %v, want EmergencyFailover and SiteFenced", reasons)
	}
	t.Logf("events: %v", reasons)
}
