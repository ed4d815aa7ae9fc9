package authn

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// jwt returns a JWT-shaped token (header.payload.signature) with the given
// JSON payload. The signature is not valid: the stub TokenReview below
// accepts whatever it is told to.
func jwt(payload string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256","typ":"JWT"}`)) + "." + enc([]byte(payload)) + "." + enc([]byte("signature"))
}

// fakeReviews is a stub TokenReview endpoint that authenticates every token as
// system:serviceaccount:ns:sa with status.audiences set to audiences, and
// that counts the reviews it is asked for.
//
// The rest of the suite uses real TokenReviews against envtest's
// kube-apiserver. This one is a stub because the real kube-apiserver never
// returns an empty status.audiences for a review with spec.audiences; an
// Authenticator that is not audience aware (a webhook, an older server) does,
// and only a stub can play it.
func fakeReviews(t *testing.T, audiences []string, reviews *int) *stubReviews {
	t.Helper()
	return &stubReviews{t: t, audiences: audiences, reviews: reviews}
}

// stubReviews plays a TokenReview endpoint that authenticates every token as
// system:serviceaccount:ns:sa with the given status.audiences.
type stubReviews struct {
	t         *testing.T
	audiences []string
	reviews   *int
}

func (s *stubReviews) Create(_ context.Context, in *authenticationv1.TokenReview, _ metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	*s.reviews++
	tr := in.DeepCopy()
	if !slices.Equal(tr.Spec.Audiences, []string{"bloodraven-deploy"}) {
		s.t.Errorf("TokenReview spec.audiences = %q, want [bloodraven-deploy]", tr.Spec.Audiences)
	}
	tr.Status = authenticationv1.TokenReviewStatus{
		Authenticated: true,
		User:          authenticationv1.UserInfo{Username: "system:serviceaccount:ns:sa"},
		Audiences:     s.audiences,
	}
	return tr, nil
}

func authenticateToken(a *Authenticator, token string) (Identity, error) {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	return a.Authenticate(context.Background(), r)
}

func TestReviewWithoutOurAudienceIsRejected(t *testing.T) {
	for _, tc := range []struct {
		name      string
		audiences []string
	}{
		{"audience-unaware Authenticator: empty status.audiences", nil},
		{"another audience", []string{"https://kubernetes.default.svc.cluster.local"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reviews int
			clk := clocktesting.NewFakeClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
			a := New(fakeReviews(t, tc.audiences, &reviews), "bloodraven-deploy", clk, time.Minute, 8)
			token := jwt(`{"aud":["bloodraven-deploy"],"exp":` + itoa(clk.Now().Add(time.Hour).Unix()) + `}`)
			for i := 0; i < 2; i++ {
				if id, err := authenticateToken(a, token); err != ErrUnauthenticated {
					t.Fatalf("authenticate = %+v, %v; want ErrUnauthenticated", id, err)
				}
			}
			if reviews != 1 || a.cache.Len() != 0 {
				t.Fatalf("%d reviews, %d cached; a rejected review must not be cached as a success, and is not repeated for %v", reviews, a.cache.Len(), RefusedTTL)
			}
		})
	}
}

func TestCachedReviewExpiresWithTheToken(t *testing.T) {
	var reviews int
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	a := New(fakeReviews(t, []string{"bloodraven-deploy"}, &reviews), "bloodraven-deploy", clk, time.Minute, 8)
	token := jwt(`{"aud":["bloodraven-deploy"],"exp":` + itoa(t0.Add(30*time.Second).Unix()) + `,"sub":"system:serviceaccount:ns:sa"}`)
	want := Identity{Namespace: "ns", ServiceAccount: "sa"}
	step := func(at time.Duration, wantReviews int) {
		t.Helper()
		clk.SetTime(t0.Add(at))
		id, err := authenticateToken(a, token)
		if err != nil || id != want {
			t.Fatalf("at t0+%v: authenticate = %+v, %v; want %+v", at, id, err, want)
		}
		if reviews != wantReviews {
			t.Fatalf("at t0+%v: %d TokenReviews, want %d", at, reviews, wantReviews)
		}
	}
	step(0, 1)
	step(10*time.Second, 1) // cached
	step(29*time.Second, 1) // cached
	// The TTL (1 minute) has not run out, but the token has: no cached
	// answer, and an expired token is refused without a review.
	clk.SetTime(t0.Add(30 * time.Second))
	if id, err := authenticateToken(a, token); err != ErrUnauthenticated || reviews != 1 {
		t.Fatalf("at exp: authenticate = %+v, %v after %d reviews; want ErrUnauthenticated and still 1 review", id, err, reviews)
	}
}

// A bearer token that is not JWT-shaped cannot be a ServiceAccount token: it
// is refused without a review.
func TestTextThatIsNoJWTCostsNoReview(t *testing.T) {
	for _, token := range []string{"opaque-token", "a.b", "a.b.c.d", "x." + "e30" + ".", ".e30.x", "x.bm90LWpzb24.x", "x.W10.x"} {
		var reviews int
		a := New(fakeReviews(t, []string{"bloodraven-deploy"}, &reviews), "bloodraven-deploy", clocktesting.NewFakeClock(time.Now()), time.Minute, 8)
		if _, err := authenticateToken(a, token); err != ErrUnauthenticated || reviews != 0 {
			t.Fatalf("%q: %v after %d reviews; want unauthenticated and none", token, err, reviews)
		}
	}
	if !jwtShaped(jwt(`{}`)) {
		t.Fatal("a JWT is JWT-shaped")
	}
}

func TestReviewAccepts(t *testing.T) {
	const ours = "bloodraven-deploy"
	for _, tc := range []struct {
		name          string
		authenticated bool
		audiences     []string
		audience      string
		want          bool
	}{
		{"our audience", true, []string{ours}, ours, true},
		{"ours among others", true, []string{"other", ours}, ours, true},
		{"empty audiences: the API server's audience, not ours", true, []string{}, ours, false},
		{"nil audiences", true, nil, ours, false},
		{"another audience only", true, []string{"https://kubernetes.default.svc"}, ours, false},
		{"not authenticated", false, []string{ours}, ours, false},
		{"no audience asked for", true, nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := authenticationv1.TokenReviewStatus{Authenticated: tc.authenticated, Audiences: tc.audiences}
			if got := reviewAccepts(st, tc.audience); got != tc.want {
				t.Fatalf("reviewAccepts(%+v, %q) = %v, want %v", st, tc.audience, got, tc.want)
			}
		})
	}
}

func TestTokenExpiry(t *testing.T) {
	enc := base64.RawURLEncoding.EncodeToString
	for _, tc := range []struct {
		name   string
		token  string
		want   time.Time
		wantOK bool
	}{
		{"integer exp", jwt(`{"exp":1900000000}`), time.Unix(1900000000, 0), true},
		{"exp among other claims", jwt(`{"aud":["a"],"exp":1900000000,"iat":1899996400}`), time.Unix(1900000000, 0), true},
		{"fractional exp", jwt(`{"exp":1900000000.5}`), time.Unix(1900000000, 5e8), true},
		{"exponent notation", jwt(`{"exp":1.9e9}`), time.Unix(1900000000, 0), true},
		{"padded payload", enc([]byte(`{}`)) + "." + base64.URLEncoding.EncodeToString([]byte(`{"exp":1900000000}`)) + ".sig", time.Unix(1900000000, 0), true},
		{"not a JWT", "opaque-token", time.Time{}, false},
		{"two segments", enc([]byte(`{}`)) + "." + enc([]byte(`{"exp":1900000000}`)), time.Time{}, false},
		{"four segments", jwt(`{"exp":1900000000}`) + ".x", time.Time{}, false},
		{"payload not base64url", "a.!!!.c", time.Time{}, false},
		{"payload not JSON", "a." + enc([]byte("exp=1900000000")) + ".c", time.Time{}, false},
		{"payload a JSON array", jwt(`[1900000000]`), time.Time{}, false},
		{"no exp", jwt(`{"sub":"x"}`), time.Time{}, false},
		{"null exp", jwt(`{"exp":null}`), time.Time{}, false},
		{"string exp", jwt(`{"exp":"1900000000"}`), time.Time{}, false},
		{"zero exp", jwt(`{"exp":0}`), time.Time{}, false},
		{"negative exp", jwt(`{"exp":-5}`), time.Time{}, false},
		{"exp beyond year 9999", jwt(`{"exp":1e30}`), time.Time{}, false},
		{"exp out of float range", jwt(`{"exp":1e400}`), time.Time{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tokenExpiry(tc.token)
			if ok != tc.wantOK || !got.Equal(tc.want) {
				t.Fatalf("tokenExpiry = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// gatedReviews is a stub TokenReview endpoint that holds every review until
// release closes, and counts them.
type gatedReviews struct {
	stubReviews
	started chan struct{}
	release chan struct{}
	count   atomic.Int64
}

func (g *gatedReviews) Create(ctx context.Context, in *authenticationv1.TokenReview, o metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	g.count.Add(1)
	g.started <- struct{}{}
	<-g.release
	var n int
	s := stubReviews{t: g.t, audiences: g.audiences, reviews: &n}
	return s.Create(ctx, in, o)
}

// Concurrent requests with one uncached token cost one TokenReview, and a
// waiter whose own request ends does not end the review for the others.
func TestConcurrentMissesForOneTokenAreOneReview(t *testing.T) {
	g := &gatedReviews{stubReviews: stubReviews{t: t, audiences: []string{"bloodraven-deploy"}},
		started: make(chan struct{}, 64), release: make(chan struct{})}
	clk := clocktesting.NewFakeClock(time.Now())
	a := New(g, "bloodraven-deploy", clk, DefaultCacheTTL, 16)
	token := jwt(`{"aud":"bloodraven-deploy","exp":` + strconv.FormatInt(clk.Now().Add(time.Hour).Unix(), 10) + `}`)
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	canceled, cancel := context.WithCancel(context.Background())
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx := context.Background()
			if i == 0 {
				ctx = canceled
			}
			r, _ := http.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
			r.Header.Set("Authorization", "Bearer "+token)
			id, err := a.Authenticate(ctx, r)
			if i != 0 && (err != nil || id.ServiceAccount != "sa") {
				errs <- fmt.Errorf("request %d: %v %+v", i, err, id)
			}
		}(i)
	}
	<-g.started
	cancel() // the first caller may give up; the review goes on
	time.Sleep(50 * time.Millisecond)
	close(g.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := g.count.Load(); got != 1 {
		t.Fatalf("%d reviews for %d concurrent requests with one token; want 1", got, n)
	}
}

// A request that misses the cache while a review of its token is finishing
// uses that review's answer: it neither waits for a review that has left
// nor starts a second one.
func TestAMissAsAReviewFinishesCostsNoSecondReview(t *testing.T) {
	g := &gatedReviews{stubReviews: stubReviews{t: t, audiences: []string{"bloodraven-deploy"}},
		started: make(chan struct{}, 64), release: make(chan struct{})}
	clk := clocktesting.NewFakeClock(time.Now())
	a := New(g, "bloodraven-deploy", clk, DefaultCacheTTL, 16)
	token := jwt(`{"aud":"bloodraven-deploy","exp":` + strconv.FormatInt(clk.Now().Add(time.Hour).Unix(), 10) + `}`)
	first := make(chan struct{})
	var misses atomic.Int64
	a.missHook = func() {
		if misses.Add(1) == 2 {
			<-first // the second request missed the cache; hold it until the first review is done
		}
	}
	go func() {
		defer close(first)
		if _, err := authenticateToken(a, token); err != nil {
			t.Error(err)
		}
	}()
	<-g.started
	second := make(chan error, 1)
	go func() { _, err := authenticateToken(a, token); second <- err }()
	for misses.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	close(g.release)
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if got := g.count.Load(); got != 1 {
		t.Fatalf("%d reviews; the second request should have used the first review's answer", got)
	}
}

func TestParseServiceAccountAcceptsOnlyServiceAccounts(t *testing.T) {
	tests := map[string]bool{
		"system:serviceaccount:app:deploy": true,
		"system:serviceaccount:app":        false,
		"system:serviceaccount::deploy":    false,
		"admin":                            false,
		"system:node:worker-1":             false,
		"system:serviceaccount:App:deploy": false,
	}
	for user, want := range tests {
		if _, ok := parseServiceAccount(user); ok != want {
			t.Errorf("%q: accepted=%v, want %v", user, ok, want)
		}
	}
}
