package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/devenv"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
	"github.com/shipstream/bloodraven/topology"
	mysqldriver "github.com/shipstream/bloodraven/topology/mysql"
)

// Killing the primary's mariadbd leads, after the detection budget, to an
// emergency promotion by the operator; the returning old primary is fenced
// read-only, then re-pointed at the new primary.
func TestEmergencyFailoverOfRealMariaDB(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	ctx := context.Background()
	p, _ := upPlayground(t)
	admin, key, g := bootstrappedWithBudget(t, p, 5)
	probe := siteObserver(t)
	site := func(name string) topology.SiteState {
		states, _ := probe.Probe(ctx, g)
		for _, s := range states {
			if s.Name == name {
				return s
			}
		}
		return topology.SiteState{}
	}
	took := killPrimaryAndWaitForPdx(t, p, probe, admin, key, g)
	t.Logf("pdx promoted %v after iad was killed (detection budget 5 s, probe interval 2 s)", took.Round(100*time.Millisecond))
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
	reasons := eventReasons(t, admin)
	if !slices.Contains(reasons, "EmergencyFailover") || !slices.Contains(reasons, "SiteFenced") {
		t.Fatalf("events %v, want EmergencyFailover and SiteFenced", reasons)
	}
	t.Logf("events: %v", reasons)
}

// bootstrapped waits for the playground's group to be bootstrapped
// (generation 1) and returns an admin client, the group's key and the group.
func bootstrapped(t *testing.T, p *devenv.Playground) (client.Client, client.ObjectKey, *bloodravenv1alpha1.MysqlFailoverGroup) {
	t.Helper()
	ctx := context.Background()
	admin, err := client.New(p.AdminConfig, client.Options{Scheme: bloodravenscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: devenv.PlaygroundNamespace, Name: devenv.GroupName}
	g := &bloodravenv1alpha1.MysqlFailoverGroup{}
	waitFor(t, 30*time.Second, func() bool { _ = admin.Get(ctx, key, g); return g.Status.TopologyGeneration == 1 })
	return admin, key, g
}

// bootstrappedWithBudget is bootstrapped, then sets the group's
// failure-detection budget to seconds.
func bootstrappedWithBudget(t *testing.T, p *devenv.Playground, seconds int32) (client.Client, client.ObjectKey, *bloodravenv1alpha1.MysqlFailoverGroup) {
	t.Helper()
	admin, key, g := bootstrapped(t, p)
	patch := client.MergeFrom(g.DeepCopy())
	g.Spec.FailureDetectionSeconds = seconds
	if err := admin.Patch(context.Background(), g, patch); err != nil { // a merge patch: the operator writes the group too
		t.Fatal(err)
	}
	return admin, key, g
}

// eventReasons lists the reasons of the Events in the playground's
// namespace.
func eventReasons(t *testing.T, admin client.Client) []string {
	t.Helper()
	var events corev1.EventList
	if err := admin.List(context.Background(), &events, client.InNamespace(devenv.PlaygroundNamespace)); err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range events.Items {
		reasons = append(reasons, e.Reason)
	}
	return reasons
}

// siteObserver is an independent observer of the playground's sites, with
// the playground's account.
func siteObserver(t *testing.T) *mysqldriver.Driver {
	t.Helper()
	probe := mysqldriver.New(mysqldriver.Static(mysqldriver.Account{User: devenv.MySQLUser, Password: devenv.MySQLPassword}))
	t.Cleanup(probe.Close)
	return probe
}

// killPrimaryAndWaitForPdx kills iad's mariadbd once pdx has everything it
// wrote (asynchronous replication: a crash before that leaves errant
// transactions on iad, which the operator rightly refuses to rejoin; the
// driver test covers it), waits until the operator promoted pdx at
// generation 2, and returns how long that took.
func killPrimaryAndWaitForPdx(t *testing.T, p *devenv.Playground, probe *mysqldriver.Driver, admin client.Client, key client.ObjectKey, g *bloodravenv1alpha1.MysqlFailoverGroup) time.Duration {
	t.Helper()
	ctx := context.Background()
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
	return time.Since(killed)
}
