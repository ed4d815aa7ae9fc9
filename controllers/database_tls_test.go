package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/mariadblocal"
	"github.com/shipstream/bloodraven/internal/pki"
	"github.com/shipstream/bloodraven/internal/testenv"
	mysqldriver "github.com/shipstream/bloodraven/topology/mysql"
)

// The operator's driver reads a group's account and CA from the Secrets
// its spec names (real API server), connects to TLS-only-trusted MariaDB
// sites, and bootstraps the group over TLS. A CA Secret holding the wrong
// CA leaves the group unbootstrapped with both sites as they were; once
// the Secret holds the right CA a following reconcile reads it (a refused
// certificate makes the driver read the Secrets again, without waiting for
// its cache's TTL) and bootstraps. The API server refuses spec.tls without
// a CA.
func TestAGroupThatRequiresTLSIsBootstrappedOverTLSFromItsSecrets(t *testing.T) {
	f := newFixture(t, false)
	now := time.Now()
	ca, err := pki.NewCA("orders-mysql-ca", now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := pki.NewCA("not-the-sites-ca", now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx, dir := context.Background(), t.TempDir()
	var servers []*mariadblocal.Server
	for i, name := range []string{"iad", "pdx"} {
		pair, err := ca.Issue(name, []string{"127.0.0.1"}, now, 24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		s, err := mariadblocal.StartWith(ctx, dir+"/"+name, name, testenv.FreePort(t), i+1, "bloodraven", "s3cret",
			mariadblocal.Options{TLS: &mariadblocal.ServerTLS{CA: ca.CertPEM, Cert: pair.CertPEM, Key: pair.KeyPEM}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Kill)
		servers = append(servers, s)
	}
	iad, pdx := servers[0], servers[1]
	if err := pdx.ReplicateFrom(ctx, iad); err != nil {
		t.Fatal(err)
	}
	caSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "orders-mysql-ca"}, Data: map[string][]byte{"ca.crt": wrong.CertPEM}}
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "orders-mysql"}, StringData: map[string]string{"username": "bloodraven", "password": "s3cret"}},
		caSecret,
	} {
		if err := env.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	// Without a CA the API server refuses spec.tls, and nothing changes.
	g := f.get()
	g.Spec.TLS = &bloodravenv1alpha1.DatabaseTLS{Mode: bloodravenv1alpha1.DatabaseTLSRequired}
	if err := env.Client.Update(ctx, g); err == nil || !strings.Contains(err.Error(), "spec.tls.caSecretRef is required when spec.tls.mode is Required") {
		t.Fatalf("spec.tls without caSecretRef: %v, want the CRD's message", err)
	}
	if f.get().Spec.TLS != nil {
		t.Fatal("a refused update changed spec.tls")
	}

	f.patchSpec(func(g *bloodravenv1alpha1.MysqlFailoverGroup) {
		g.Spec.Sites = []bloodravenv1alpha1.Site{{Name: "iad", Host: "127.0.0.1", Port: int32(iad.Port)}, {Name: "pdx", Host: "127.0.0.1", Port: int32(pdx.Port)}}
		g.Spec.CredentialsSecretRef = &bloodravenv1alpha1.SecretReference{Name: "orders-mysql"}
		g.Spec.TLS = &bloodravenv1alpha1.DatabaseTLS{CASecretRef: &bloodravenv1alpha1.SecretReference{Name: "orders-mysql-ca"}}
	})
	if m := f.get().Spec.TLS.Mode; m != bloodravenv1alpha1.DatabaseTLSRequired {
		t.Fatalf("spec.tls.mode defaulted to %q, want Required", m)
	}
	// The cache's TTL runs on the real clock: five minutes, far longer than
	// this test, so only the driver's invalidation can make it read the
	// mended Secret (and the driver's own waits sleep for real).
	d := mysqldriver.NewCached(mysqldriver.FromSecrets(env.Client), clock.RealClock{})
	t.Cleanup(d.Close)
	f.rec.Driver = d

	f.rounds(3, func(int) {})
	if g := f.get(); g.Status.TopologyGeneration != 0 || g.Status.ActiveSite != "" {
		t.Fatalf("with the wrong CA the group was bootstrapped: %s/%d", g.Status.ActiveSite, g.Status.TopologyGeneration)
	}
	if w := writableServers(t, iad, pdx); len(w) != 1 || w[0] != "iad" {
		t.Fatalf("with the wrong CA the sites changed: writable %v, want [iad]", w)
	}

	finished := func() int {
		t.Helper()
		root, err := iad.Root()
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		var name string
		var n int
		if err := root.QueryRow("SHOW GLOBAL STATUS LIKE 'Ssl_finished_accepts'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := finished() // the refused attempts' handshakes never finished
	caSecret.Data["ca.crt"] = ca.CertPEM
	if err := env.Client.Update(ctx, caSecret); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6 && f.get().Status.TopologyGeneration == 0; i++ {
		f.rounds(1, func(int) {})
	}
	if g := f.get(); g.Status.TopologyGeneration != 1 || g.Status.ActiveSite != "iad" {
		t.Fatalf("with the right CA: %s/%d, want iad/1", g.Status.ActiveSite, g.Status.TopologyGeneration)
	}
	// The driver's connections are TLS: the server counts its finished
	// handshakes.
	if after := finished(); after <= before {
		t.Fatalf("iad finished %d TLS handshakes before the CA was mended and %d after: the driver's connections were not TLS", before, after)
	}
}
