package testenv_test

import (
	"context"
	"os"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/shipstream/bloodraven/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

// The deployment API authenticates callers with projected ServiceAccount
// tokens for its own audience; the control plane built by `make tools` must
// issue and review them like a real cluster.
func TestTokenRequestAndReviewWithDeployAudience(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deploy", Namespace: ns}}
	if err := env.Client.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	tr, err := env.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "deploy", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"bloodraven-deploy"}, ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest: %v", err)
	}

	tests := map[string]struct {
		audience      string
		authenticated bool
	}{
		"same audience is authenticated":      {audience: "bloodraven-deploy", authenticated: true},
		"other audience is not authenticated": {audience: "some-other-api", authenticated: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rev, err := env.Kube.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
				Spec: authenticationv1.TokenReviewSpec{Token: tr.Status.Token, Audiences: []string{tc.audience}},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("TokenReview: %v", err)
			}
			if rev.Status.Authenticated != tc.authenticated {
				t.Fatalf("authenticated = %v, want %v (error %q)", rev.Status.Authenticated, tc.authenticated, rev.Status.Error)
			}
			if tc.authenticated {
				if want := "system:serviceaccount:" + ns + ":deploy"; rev.Status.User.Username != want {
					t.Fatalf("username = %q, want %q", rev.Status.User.Username, want)
				}
			}
		})
	}
}
