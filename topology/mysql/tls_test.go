package mysql

import (
	"context"
	"crypto/x509"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/mariadblocal"
	"github.com/shipstream/bloodraven/internal/pki"
	"github.com/shipstream/bloodraven/internal/readonly"
)

// tlsSites are two MariaDB servers that offer TLS with certificates from
// the test's CA for 127.0.0.1, pdx replicating from iad, and one server
// that offers no TLS at all.
type tlsSites struct {
	ca, other     *pki.CA
	iad, pdx, raw *mariadblocal.Server
}

func startTLSSites(t *testing.T) *tlsSites {
	t.Helper()
	if err := mariadblocal.Available(); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca, err := pki.NewCA("bloodraven-test-mysql-ca", now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("another-ca", now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx, dir := context.Background(), t.TempDir()
	start := func(name string, id int, withTLS bool) *mariadblocal.Server {
		var o mariadblocal.Options
		if withTLS {
			pair, err := ca.Issue(name, []string{"127.0.0.1"}, now, 24*time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			o.TLS = &mariadblocal.ServerTLS{CA: ca.CertPEM, Cert: pair.CertPEM, Key: pair.KeyPEM}
		}
		s, err := mariadblocal.StartWith(ctx, dir+"/"+name, name, freePort(t), id, "bloodraven", "s3cret", o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Kill)
		return s
	}
	s := &tlsSites{ca: ca, other: other, iad: start("iad", 1, true), pdx: start("pdx", 2, true), raw: start("raw", 3, false)}
	if err := s.pdx.ReplicateFrom(ctx, s.iad); err != nil {
		t.Fatal(err)
	}
	return s
}

// tlsGroup is a group over sites whose spec.tls requires TLS.
func tlsGroup(sites ...bloodravenv1alpha1.Site) *bloodravenv1alpha1.MysqlFailoverGroup {
	return &bloodravenv1alpha1.MysqlFailoverGroup{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "db", UID: "uid-orders"},
		Spec: bloodravenv1alpha1.MysqlFailoverGroupSpec{Sites: sites, TLS: &bloodravenv1alpha1.DatabaseTLS{
			Mode: bloodravenv1alpha1.DatabaseTLSRequired, CASecretRef: &bloodravenv1alpha1.SecretReference{Name: "orders-mysql-ca"}}}}
}

func siteAt(name, host string, srv *mariadblocal.Server) bloodravenv1alpha1.Site {
	return bloodravenv1alpha1.Site{Name: name, Host: host, Port: int32(srv.Port)}
}

// sessionCipher is the TLS cipher of one of the driver's connections to a
// site ("" for plaintext).
func sessionCipher(t *testing.T, d *Driver, g *bloodravenv1alpha1.MysqlFailoverGroup, sp bloodravenv1alpha1.Site) string {
	t.Helper()
	s, err := d.open(context.Background(), g, sp)
	if err != nil {
		t.Fatal(err)
	}
	var name, cipher string
	if err := s.db.QueryRow("SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &cipher); err != nil {
		t.Fatal(err)
	}
	return cipher
}

func readOnly(t *testing.T, srv *mariadblocal.Server) bool {
	t.Helper()
	db, err := srv.Root()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ro bool
	if err := db.QueryRow("SELECT @@global.read_only").Scan(&ro); err != nil {
		t.Fatal(err)
	}
	return ro
}

// A group whose spec.tls requires TLS is served only by a site whose
// certificate chains to the group's CA and names the site's host. Every
// other case is refused before any statement: the site stays as it was
// (Fence changes nothing), the probe calls it unreachable, and the driver
// reads the group's Secrets again on its next call (the CA may have been
// rotated, or the Secret mended).
func TestTLSRequiredRefusesAServerItCannotVerify(t *testing.T) {
	s := startTLSSites(t)
	right := &TLSMaterial{CA: s.ca.CertPEM}
	cases := []struct {
		name     string
		site     bloodravenv1alpha1.Site
		tls      *TLSMaterial
		refused  func(error) bool
		rereads  bool
		wantText string
	}{
		{name: "the group's CA and the address the certificate names", site: siteAt("iad", "127.0.0.1", s.iad), tls: right},
		{name: "a CA that did not sign the server's certificate", site: siteAt("iad", "127.0.0.1", s.iad), tls: &TLSMaterial{CA: s.other.CertPEM},
			refused: func(err error) bool { var e x509.UnknownAuthorityError; return errors.As(err, &e) }, rereads: true,
			wantText: "certificate signed by unknown authority"},
		{name: "a host the server's certificate does not name", site: siteAt("iad", "localhost", s.iad), tls: right,
			refused: func(err error) bool { var e x509.HostnameError; return errors.As(err, &e) }, rereads: true,
			wantText: "wanted to match localhost"},
		{name: "a server that offers no TLS", site: siteAt("iad", "127.0.0.1", s.raw), tls: right,
			refused: func(err error) bool { return errors.Is(err, gomysql.ErrNoTLS) }, rereads: true,
			wantText: "server does not support TLS"},
		{name: "an account read without the group's CA", site: siteAt("iad", "127.0.0.1", s.iad),
			refused: func(err error) bool { return errors.Is(err, errTLSNotConfigured) }, rereads: true,
			wantText: "refuses to connect in plaintext"},
		{name: "a ca.crt that holds no certificate", site: siteAt("iad", "127.0.0.1", s.iad), tls: &TLSMaterial{CA: []byte("not PEM")},
			refused: func(err error) bool { return err != nil }, rereads: true,
			wantText: "holds no PEM certificate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var rereads atomic.Int32
			d := New(Static(Account{User: "bloodraven", Password: "s3cret", TLS: tc.tls}))
			d.CredentialsRejected = func(*bloodravenv1alpha1.MysqlFailoverGroup) { rereads.Add(1) }
			t.Cleanup(d.Close)
			g := tlsGroup(tc.site)
			st, err := d.Probe(context.Background(), g)
			if err != nil {
				t.Fatal(err)
			}
			if tc.refused == nil {
				if !st[0].Reachable || !st[0].Writable {
					t.Fatalf("probe = %+v, want the reachable writable primary", st[0])
				}
				if c := sessionCipher(t, d, g, tc.site); c == "" {
					t.Fatal("the driver's session has no TLS cipher: it connected in plaintext")
				}
				return
			}
			if st[0].Reachable {
				t.Fatalf("probe = %+v, want the site unreachable to the driver", st[0])
			}
			srv := s.iad
			if tc.site.Port == int32(s.raw.Port) {
				srv = s.raw
			}
			err = d.Fence(context.Background(), g, "iad")
			if err == nil || !tc.refused(err) || !strings.Contains(err.Error(), tc.wantText) {
				t.Fatalf("Fence: %v, want refused with %q", err, tc.wantText)
			}
			if readOnly(t, srv) {
				t.Fatal("a refused connection changed the site: it is read-only")
			}
			if got := rereads.Load() > 0; got != tc.rereads {
				t.Fatalf("the account was invalidated: %v, want %v", got, tc.rereads)
			}
		})
	}
}

// An account created REQUIRE X509 is served when the group names a client
// certificate from the CA the server trusts, and refused (access denied)
// without one.
func TestAClientCertificateServesAnAccountThatRequiresOne(t *testing.T) {
	s := startTLSSites(t)
	root, err := s.iad.Root()
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, q := range []string{
		"CREATE USER 'certified'@'%' IDENTIFIED BY 'pw' REQUIRE X509",
		"GRANT ALL PRIVILEGES ON *.* TO 'certified'@'%'",
	} {
		if _, err := root.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	client, err := s.ca.IssueClient("bloodraven-operator", nil, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sp := siteAt("iad", "127.0.0.1", s.iad)
	for _, tc := range []struct {
		name  string
		tls   *TLSMaterial
		serve bool
	}{
		{"with the client certificate", &TLSMaterial{CA: s.ca.CertPEM, ClientCert: client.CertPEM, ClientKey: client.KeyPEM}, true},
		{"without one", &TLSMaterial{CA: s.ca.CertPEM}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rereads atomic.Int32
			d := New(Static(Account{User: "certified", Password: "pw", TLS: tc.tls}))
			d.CredentialsRejected = func(*bloodravenv1alpha1.MysqlFailoverGroup) { rereads.Add(1) }
			t.Cleanup(d.Close)
			g := tlsGroup(sp)
			_, err := d.open(context.Background(), g, sp)
			if tc.serve {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var me *gomysql.MySQLError
			if !errors.As(err, &me) || me.Number != 1045 {
				t.Fatalf("open: %v, want access denied (1045)", err)
			}
			if rereads.Load() == 0 {
				t.Fatal("a refused account did not make the driver read the Secrets again")
			}
		})
	}
	if _, err := (&TLSMaterial{CA: s.ca.CertPEM, ClientCert: client.CertPEM}).config("x"); err == nil || !strings.Contains(err.Error(), "tls.key") {
		t.Fatalf("a certificate without its key: %v, want an error naming tls.key", err)
	}
}

// A planned switchover of a group that requires TLS runs over TLS, and the
// old primary then replicates from the new one over TLS (MASTER_SSL=1):
// the account's password does not cross between sites in plaintext. No
// sample ever sees both sites writable.
func TestAPlannedSwitchoverOverTLSReplicatesOverTLS(t *testing.T) {
	s := startTLSSites(t)
	sampler := readonly.Start(t, map[string]string{"iad": s.iad.DSN(""), "pdx": s.pdx.DSN("")})
	g := tlsGroup(siteAt("iad", "127.0.0.1", s.iad), siteAt("pdx", "127.0.0.1", s.pdx))
	d := New(Static(Account{User: "bloodraven", Password: "s3cret", TLS: &TLSMaterial{CA: s.ca.CertPEM}}))
	t.Cleanup(d.Close)
	sw := &sites{iad: s.iad, pdx: s.pdx, group: g, driver: d}
	sw.waitReplicating(t, "pdx")
	start := time.Now()
	if err := d.Promote(context.Background(), g, "pdx", 2, true); err != nil {
		t.Fatal(err)
	}
	if both := sampler.TwoWritable(start, time.Time{}); len(both) > 0 {
		t.Fatalf("both sites writable in %d samples during the switchover:\n%s", len(both), sampler.Timeline())
	}
	if !readOnly(t, s.iad) || readOnly(t, s.pdx) {
		t.Fatal("after the switchover iad must be read-only and pdx writable")
	}
	sw.waitReplicating(t, "iad")
	iad, err := d.open(context.Background(), g, g.Spec.Sites[0])
	if err != nil {
		t.Fatal(err)
	}
	status, err := iad.replicaStatus(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if status["Master_SSL_Allowed"] != "Yes" || status["Master_Port"] != strconv.Itoa(s.pdx.Port) || status["Slave_IO_Running"] != "Yes" {
		t.Fatalf("iad's replication: Master_SSL_Allowed=%q Master_Port=%q Slave_IO_Running=%q, want Yes, %d, Yes",
			status["Master_SSL_Allowed"], status["Master_Port"], status["Slave_IO_Running"], s.pdx.Port)
	}
}

// A planned switchover of a TLS group whose target or old primary is
// paused (SIGSTOP: the kernel accepts the connection, the TLS handshake
// never answers) fails without opening the target: no sample of
// @@read_only, taken every 100 ms on both sites, sees two writable, and the
// target stays read-only once the paused site resumes.
func TestAPlannedSwitchoverOverTLSToOrFromAPausedSiteOpensNothing(t *testing.T) {
	for _, paused := range []string{"pdx", "iad"} {
		t.Run(paused+" paused", func(t *testing.T) {
			s := startTLSSites(t)
			sampler := readonly.Start(t, map[string]string{"iad": s.iad.DSN(""), "pdx": s.pdx.DSN("")})
			g := tlsGroup(siteAt("iad", "127.0.0.1", s.iad), siteAt("pdx", "127.0.0.1", s.pdx))
			d := New(Static(Account{User: "bloodraven", Password: "s3cret", TLS: &TLSMaterial{CA: s.ca.CertPEM}}))
			t.Cleanup(d.Close)
			(&sites{iad: s.iad, pdx: s.pdx, group: g, driver: d}).waitReplicating(t, "pdx")
			srv := map[string]*mariadblocal.Server{"iad": s.iad, "pdx": s.pdx}[paused]
			if err := srv.Pause(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Resume() })
			start := sampler.Mark("paused")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := d.Promote(ctx, g, "pdx", 2, true); err == nil {
				t.Fatalf("a planned switchover with %s paused succeeded", paused)
			}
			if err := srv.Resume(); err != nil {
				t.Fatal(err)
			}
			if !readOnly(t, s.pdx) {
				t.Fatal("the target was opened although the switchover failed")
			}
			if both := sampler.TwoWritable(start, time.Time{}); len(both) > 0 {
				t.Fatalf("both sites writable in %d samples:\n%s", len(both), sampler.Timeline())
			}
		})
	}
}
