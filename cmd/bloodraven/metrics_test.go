package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/shipstream/bloodraven/internal/pki"
	"github.com/shipstream/bloodraven/internal/scene"
	"github.com/shipstream/bloodraven/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

// grant binds the ServiceAccount ns/sa to a new ClusterRole of rules and
// returns a real TokenRequest token for it.
func grant(t *testing.T, ns, sa string, rules []rbacv1.PolicyRule) string {
	t.Helper()
	ctx := context.Background()
	name := ns + "-" + sa
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}}
	if len(rules) > 0 {
		if err := env.Client.Create(ctx, role); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Create(ctx, binding); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.Client.Delete(context.Background(), binding)
			_ = env.Client.Delete(context.Background(), role)
		})
	}
	token, err := scene.Token(ctx, env.Kube, ns, sa, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// With --metrics-secure, /metrics is HTTPS with the listener's certificate
// and answers only a caller whose token the API server accepts (a real
// TokenReview) and who may get the non-resource URL /metrics (a real
// SubjectAccessReview). The operator makes both reviews with the generated
// role (config/rbac/role.yaml) and nothing more; without the flag the
// endpoint stays plain HTTP for anyone.
func TestSecureMetricsAnswerOnlyAReviewedAndAuthorizedCaller(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := env.Namespace(t)
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	generated := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(data, generated); err != nil {
		t.Fatal(err)
	}
	operatorCfg := rest.CopyConfig(env.Config)
	operatorCfg.CertData, operatorCfg.KeyData, operatorCfg.Username, operatorCfg.Password = nil, nil, "", ""
	operatorCfg.BearerToken = grant(t, ns, "operator", generated.Rules)
	scraper := grant(t, ns, "scraper", []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}})
	stranger := grant(t, ns, "stranger", nil)

	ca, err := pki.NewCA("metrics-test", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Issue("bloodraven", []string{"127.0.0.1"}, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := pair.WriteTLSDir(dir); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)

	start := func(secure bool) string {
		t.Helper()
		o := options{metricsAddr: testenv.FreeAddr(t), metricsSecure: secure, tlsCertDir: dir}
		hc, err := rest.HTTPClientFor(operatorCfg)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := metricsserver.NewServer(metricsOptions(o), operatorCfg, hc)
		if err != nil {
			t.Fatal(err)
		}
		sctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- srv.Start(sctx) }()
		t.Cleanup(func() { stop(); <-done })
		return o.metricsAddr
	}
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	get := func(url, token string) (int, string, error) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	// until waits for the server to listen and returns the first answer.
	until := func(url, token string) (int, string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			code, body, err := get(url, token)
			if err == nil {
				return code, body
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: %v", url, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	addr := start(true)
	if code, _ := until("https://"+addr+"/metrics", scraper); code != http.StatusOK {
		t.Fatalf("the scraper bound to get /metrics: %d, want 200", code)
	}
	tests := map[string]struct {
		url, token string
		want       int
		wantBody   string
	}{
		"a token allowed to get /metrics is served": {url: "https://" + addr + "/metrics", token: scraper, want: http.StatusOK, wantBody: "go_goroutines"},
		"no token is unauthorized":                  {url: "https://" + addr + "/metrics", want: http.StatusUnauthorized},
		// controller-runtime's filter answers 500 "Authentication failed"
		// when the TokenReview reports an error, as it does for a token it
		// cannot parse: refused all the same.
		"a token the API server cannot parse":          {url: "https://" + addr + "/metrics", token: "not-a-token", want: http.StatusInternalServerError, wantBody: "Authentication failed"},
		"a valid token without the grant is forbidden": {url: "https://" + addr + "/metrics", token: stranger, want: http.StatusForbidden},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			code, body, err := get(tc.url, tc.token)
			if err != nil {
				t.Fatal(err)
			}
			if code != tc.want || !strings.Contains(body, tc.wantBody) {
				t.Fatalf("%d %.200q, want %d with %q", code, body, tc.want, tc.wantBody)
			}
			if tc.want != http.StatusOK && strings.Contains(body, "go_goroutines") {
				t.Fatal("a refused caller saw metrics")
			}
		})
	}
	t.Run("plain HTTP is not served", func(t *testing.T) {
		if code, _, err := get("http://"+addr+"/metrics", scraper); err == nil && code == http.StatusOK {
			t.Fatal("plain HTTP answered 200 on the secure endpoint")
		}
	})
	t.Run("without the flag the endpoint is plain HTTP for anyone", func(t *testing.T) {
		plain := start(false)
		if code, body := until("http://"+plain+"/metrics", ""); code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
			t.Fatalf("%d %.200q", code, body)
		}
	})
}
