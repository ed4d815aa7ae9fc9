package authn

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

const (
	testAudience = "bloodraven-deploy"
	clusterIss   = "https://kubernetes.default.svc.cluster.local"
)

// countingReviews is a stub TokenReview endpoint for the limits' tests. It
// accepts every token as system:serviceaccount:ns:sa for our audience
// unless told to refuse or fail, counts the reviews and the most in flight
// at once, and holds each review while block is set until release closes.
type countingReviews struct {
	count, inFlight, maxInFlight atomic.Int64
	refuse                       atomic.Bool
	fail                         atomic.Bool
	block                        atomic.Bool
	started                      chan struct{} // one send per review, when buffered room is left
	release                      chan struct{}
}

// floodToken is a unique token whose unverified claims pass but that the
// stub refuses, as the API server refuses forged tokens.
func floodToken(now time.Time) string {
	return jwt(fmt.Sprintf(`{"aud":[%q],"exp":%d,"iss":%q,"sub":"flood","jti":"%d"}`, testAudience, now.Add(time.Hour).Unix(), clusterIss, tokenSeq.Add(1)))
}

// isFlood reports whether a token is a floodToken.
func isFlood(token string) bool {
	_, rest, _ := strings.Cut(token, ".")
	body, _, _ := strings.Cut(rest, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(body)
	return strings.Contains(string(payload), `"sub":"flood"`)
}

func newCountingReviews() *countingReviews {
	return &countingReviews{started: make(chan struct{}, 1024), release: make(chan struct{})}
}

func (s *countingReviews) Create(ctx context.Context, in *authenticationv1.TokenReview, _ metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	s.count.Add(1)
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.maxInFlight.Load()
		if n <= m || s.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	select {
	case s.started <- struct{}{}:
	default:
	}
	if s.block.Load() {
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if s.fail.Load() {
		return nil, apierrors.NewServiceUnavailable("etcd down")
	}
	tr := in.DeepCopy()
	if !s.refuse.Load() && !isFlood(in.Spec.Token) {
		tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true,
			User: authenticationv1.UserInfo{Username: "system:serviceaccount:ns:sa"}, Audiences: []string{testAudience}}
	}
	return tr, nil
}

// waitStarted waits until n reviews have started.
func (s *countingReviews) waitStarted(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-s.started:
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d reviews started", i, n)
		}
	}
}

var tokenSeq atomic.Int64

// validToken is a unique JWT-shaped token whose unverified claims pass: our
// audience, exp an hour after now, issuer iss.
func validToken(now time.Time, iss string) string {
	return jwt(fmt.Sprintf(`{"aud":[%q],"exp":%d,"iss":%q,"jti":"%d"}`, testAudience, now.Add(time.Hour).Unix(), iss, tokenSeq.Add(1)))
}

// authFrom authenticates token as a request from source (host:port).
func authFrom(a *Authenticator, token, source string) (Identity, error) {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	r.RemoteAddr = source
	return a.Authenticate(context.Background(), r)
}

// isBusy reports whether err is ErrBusy (503 unavailable with
// Retry-After: 1 in the deployment API).
func isBusy(err error) bool { return errors.Is(err, ErrBusy) }

// waitIdle waits until no review (background re-reviews included) is in
// flight.
func waitIdle(t *testing.T, a *Authenticator) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if a.running.Load() == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("reviews still in flight")
}

func newLimitedAuthenticator(s *countingReviews, clk *clocktesting.FakeClock) *Authenticator {
	return New(s, testAudience, clk, DefaultCacheTTL, DefaultCacheSize)
}

// Unique JWT-shaped junk whose unverified claims cannot pass a review is
// refused 401 locally: no review, and no miss counted against its source.
func TestJunkWithImpossibleClaimsCostsNoReview(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	exp := fmt.Sprint(t0.Add(time.Hour).Unix())
	for _, tc := range []struct {
		name    string
		payload string // %d is a unique number
	}{
		{"wrong aud string", `{"aud":"another","exp":` + exp + `,"iss":"` + clusterIss + `","jti":"%d"}`},
		{"wrong aud array", `{"aud":["another","https://kubernetes.default.svc"],"exp":` + exp + `,"iss":"` + clusterIss + `","jti":"%d"}`},
		{"no aud", `{"exp":` + exp + `,"iss":"` + clusterIss + `","jti":"%d"}`},
		{"aud in another case", `{"AUD":["bloodraven-deploy"],"exp":` + exp + `,"iss":"` + clusterIss + `","jti":"%d"}`},
		{"aud not a string", `{"aud":[7],"exp":` + exp + `,"iss":"` + clusterIss + `","jti":"%d"}`},
		{"no exp", `{"aud":["bloodraven-deploy"],"iss":"` + clusterIss + `","jti":"%d"}`},
		{"exp past", `{"aud":["bloodraven-deploy"],"exp":` + fmt.Sprint(t0.Add(-time.Second).Unix()) + `,"iss":"` + clusterIss + `","jti":"%d"}`},
		{"exp now", `{"aud":["bloodraven-deploy"],"exp":` + fmt.Sprint(t0.Unix()) + `,"iss":"` + clusterIss + `","jti":"%d"}`},
		{"exp a string", `{"aud":["bloodraven-deploy"],"exp":"` + exp + `","iss":"` + clusterIss + `","jti":"%d"}`},
		{"exp null", `{"aud":["bloodraven-deploy"],"exp":null,"iss":"` + clusterIss + `","jti":"%d"}`},
		{"iss not a string", `{"aud":["bloodraven-deploy"],"exp":` + exp + `,"iss":42,"jti":"%d"}`},
		{"foreign iss once one is learned", `{"aud":["bloodraven-deploy"],"exp":` + exp + `,"iss":"https://attacker.example","jti":"%d"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newCountingReviews()
			clk := clocktesting.NewFakeClock(t0)
			a := newLimitedAuthenticator(s, clk)
			if _, err := authFrom(a, validToken(t0, clusterIss), "10.0.0.1:1"); err != nil { // learns the issuer
				t.Fatal(err)
			}
			// The rotation budget for unknown issuers is the subject of
			// TestUnknownIssuersAreReviewedWithinABudget; spend it here.
			a.limits.takeUnknownIssuer(t0)
			const n = 200
			for i := 0; i < n; i++ {
				if id, err := authFrom(a, jwt(fmt.Sprintf(tc.payload, i)), "10.0.0.2:1"); err != ErrUnauthenticated {
					t.Fatalf("junk %d: %+v, %v; want ErrUnauthenticated", i, id, err)
				}
			}
			if got := s.count.Load(); got != 1 {
				t.Fatalf("%d junk tokens cost %d reviews; want none", n, got-1)
			}
			// Local refusals are not misses: the source's bucket is full.
			for i := 0; i < sourceMissBurst; i++ {
				if _, err := authFrom(a, validToken(t0, clusterIss), "10.0.0.2:1"); err != nil {
					t.Fatalf("the junk's source, miss %d: %v; its bucket should be untouched", i, err)
				}
			}
		})
	}
}

// However many unique, plausible tokens arrive at once, at most
// maxConcurrentReviews reviews are in flight; the misses that get no slot
// within the wait answer 503 unavailable with Retry-After, without a review.
func TestConcurrentReviewsAreBounded(t *testing.T) {
	s := newCountingReviews()
	s.block.Store(true)
	clk := clocktesting.NewFakeClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	a := newLimitedAuthenticator(s, clk)
	a.limits.slotWait = 100 * time.Millisecond
	const n = 100
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) { // each from its own source: only the slots limit them
			defer wg.Done()
			_, err := authFrom(a, validToken(clk.Now(), clusterIss), fmt.Sprintf("10.1.%d.%d:443", i/256, i%256))
			errs <- err
		}(i)
	}
	s.waitStarted(t, maxConcurrentReviews)
	var busy int
	for busy < n-maxConcurrentReviews {
		select {
		case err := <-errs:
			if !isBusy(err) {
				t.Fatalf("a miss with every slot taken: %v; want 503 unavailable with Retry-After: 1", err)
			}
			busy++
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d misses were answered while the slots were taken", busy)
		}
	}
	close(s.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a review that had a slot: %v", err)
		}
	}
	if got := s.maxInFlight.Load(); got != maxConcurrentReviews {
		t.Fatalf("%d reviews in flight at most; want %d", got, maxConcurrentReviews)
	}
	if got := s.count.Load(); got != maxConcurrentReviews {
		t.Fatalf("%d reviews for %d misses; want %d (the others answered 503)", got, n, maxConcurrentReviews)
	}
}

// A request whose token is cached (a success, a success due for its
// re-review, or a refusal) is answered at once while every review slot is
// taken by other tokens' reviews.
func TestCachedTokenNeverWaitsForReviewSlots(t *testing.T) {
	s := newCountingReviews()
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	a := newLimitedAuthenticator(s, clk)
	a.limits.slotWait = 5 * time.Second // waiting for a slot would show
	victim := validToken(t0, clusterIss)
	if _, err := authFrom(a, victim, "127.0.0.1:1000"); err != nil {
		t.Fatal(err)
	}
	s.refuse.Store(true)
	refused := validToken(t0, clusterIss)
	if _, err := authFrom(a, refused, "127.0.0.1:1001"); err != ErrUnauthenticated {
		t.Fatal(err)
	}
	s.refuse.Store(false)

	s.block.Store(true)
	var wg sync.WaitGroup
	for i := 0; i < maxConcurrentReviews+4; i++ { // 8 take the slots, 4 wait for one
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, _ = authFrom(a, validToken(t0, clusterIss), fmt.Sprintf("10.2.0.%d:1", i))
		}(i)
	}
	s.waitStarted(t, 2+maxConcurrentReviews)
	for _, tc := range []struct {
		name  string
		step  time.Duration
		token string
		want  error
	}{
		{"a cached success", 0, victim, nil},
		{"a cached refusal", 0, refused, ErrUnauthenticated},
		{"a cached success due for its re-review", DefaultCacheTTL/2 + time.Second, victim, nil},
	} {
		clk.Step(tc.step)
		start := time.Now()
		_, err := authFrom(a, tc.token, "127.0.0.1:1002") // the same host as the victim's and the flood's
		if d := time.Since(start); err != tc.want || d > time.Second {
			t.Fatalf("%s: %v after %v; want %v at once", tc.name, err, d, tc.want)
		}
	}
	close(s.release)
	wg.Wait()
	waitIdle(t, a)
	if got := s.count.Load(); got != 2+maxConcurrentReviews+4+1 {
		t.Fatalf("%d reviews; want the 2 first, the %d blocked misses and the victim's re-review", got, maxConcurrentReviews+4)
	}
}

// A cached success older than half the ttl is still answered from the cache
// and starts one background re-review: its success renews the entry, its
// refusal evicts it, its error leaves it to expire; the entry never outlives
// the ttl or the token's exp.
func TestRefreshAhead(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	half := DefaultCacheTTL / 2
	setup := func(t *testing.T, exp time.Time) (*countingReviews, *clocktesting.FakeClock, *Authenticator, string) {
		s := newCountingReviews()
		clk := clocktesting.NewFakeClock(t0)
		a := newLimitedAuthenticator(s, clk)
		token := jwt(fmt.Sprintf(`{"aud":[%q],"exp":%d,"iss":%q}`, testAudience, exp.Unix(), clusterIss))
		if _, err := authFrom(a, token, "127.0.0.1:1"); err != nil || s.count.Load() != 1 {
			t.Fatalf("first request: %v after %d reviews", err, s.count.Load())
		}
		return s, clk, a, token
	}
	t.Run("a hit after half the ttl answers at once and starts exactly one re-review", func(t *testing.T) {
		s, clk, a, token := setup(t, t0.Add(time.Hour))
		clk.Step(half - time.Second)
		if _, err := authFrom(a, token, "127.0.0.1:1"); err != nil {
			t.Fatal(err)
		}
		waitIdle(t, a)
		if got := s.count.Load(); got != 1 {
			t.Fatalf("%d reviews before half the ttl; want 1", got)
		}
		clk.Step(time.Second)
		s.block.Store(true)
		for i := 0; i < 10; i++ {
			start := time.Now()
			if _, err := authFrom(a, token, "127.0.0.1:1"); err != nil || time.Since(start) > time.Second {
				t.Fatalf("hit %d while its re-review is held: %v after %v", i, err, time.Since(start))
			}
		}
		s.waitStarted(t, 2)
		close(s.release)
		waitIdle(t, a)
		if got := s.count.Load(); got != 2 {
			t.Fatalf("%d reviews; want the first and one re-review", got)
		}
		// Renewed: cached a ttl past the re-review, due again half a ttl after it.
		clk.Step(DefaultCacheTTL - time.Second)
		if _, err := authFrom(a, token, "127.0.0.1:1"); err != nil {
			t.Fatal(err)
		}
		waitIdle(t, a)
		if got := s.count.Load(); got != 3 {
			t.Fatalf("%d reviews; want a second re-review, no miss", got)
		}
	})
	t.Run("a caller that keeps coming never misses, even with its source flooded", func(t *testing.T) {
		s, clk, a, token := setup(t, t0.Add(time.Hour))
		var misses atomic.Int64
		a.missHook = func() { misses.Add(1) }
		for i := 0; i < 30; i++ { // renewals every 10 s for 5 minutes
			for j := 0; j < 100; j++ { // the flood: unique plausible tokens from the same host
				_, _ = authFrom(a, floodToken(clk.Now()), "127.0.0.1:2")
			}
			misses.Store(0)
			if _, err := authFrom(a, token, "127.0.0.1:1"); err != nil || misses.Load() != 0 {
				t.Fatalf("renewal %d: %v, %d misses; want a cache hit", i, err, misses.Load())
			}
			waitIdle(t, a)
			clk.Step(10 * time.Second)
		}
		if s.count.Load() > 1+30+30*(sourceMissBurst+10*sourceMissRate) {
			t.Fatalf("%d reviews", s.count.Load())
		}
	})
	t.Run("a refusal from the re-review evicts", func(t *testing.T) {
		s, clk, a, token := setup(t, t0.Add(time.Hour))
		clk.Step(half)
		s.refuse.Store(true)
		if _, err := authFrom(a, token, "127.0.0.1:1"); err != nil {
			t.Fatalf("the hit that starts the re-review: %v; want the cached answer", err)
		}
		waitIdle(t, a)
		if a.cache.Len() != 0 {
			t.Fatal("the refused token is still cached")
		}
		if _, err := authFrom(a, token, "127.0.0.1:1"); err != ErrUnauthenticated || s.count.Load() != 2 {
			t.Fatalf("after the refusal: %v after %d reviews; want ErrUnauthenticated from the refusal cache", err, s.count.Load())
		}
	})
	t.Run("an error leaves the entry to expire", func(t *testing.T) {
		s, clk, a, token := setup(t, t0.Add(time.Hour))
		s.fail.Store(true)
		for _, at := range []time.Duration{half, DefaultCacheTTL - time.Millisecond} {
			clk.SetTime(t0.Add(at))
			if _, err := authFrom(a, token, "127.0.0.1:1"); err != nil {
				t.Fatalf("at t0+%v: %v; want the cached answer", at, err)
			}
			waitIdle(t, a)
		}
		if got := s.count.Load(); got != 3 {
			t.Fatalf("%d reviews; want the first and two failed re-reviews", got)
		}
		clk.SetTime(t0.Add(DefaultCacheTTL))
		if _, err := authFrom(a, token, "127.0.0.1:1"); err == nil || err == ErrUnauthenticated {
			t.Fatalf("at the ttl: %v; want the API server's error (no cached answer past the ttl)", err)
		}
	})
	t.Run("never past the token's exp", func(t *testing.T) {
		s, clk, a, token := setup(t, t0.Add(10*time.Second))
		clk.Step(half)
		if _, err := authFrom(a, token, "127.0.0.1:1"); err != nil {
			t.Fatal(err)
		}
		waitIdle(t, a)
		clk.SetTime(t0.Add(10 * time.Second))
		if _, err := authFrom(a, token, "127.0.0.1:1"); err != ErrUnauthenticated || s.count.Load() != 2 {
			t.Fatalf("at exp: %v after %d reviews; want ErrUnauthenticated without a review", err, s.count.Load())
		}
	})
}

// Misses are limited per source address: a flooding source gets 503
// unavailable with Retry-After: 1 after its burst, without a review, while
// another source's first miss is reviewed; cached hits and local refusals
// are not misses.
func TestSourceOverItsMissRateGets503(t *testing.T) {
	s := newCountingReviews()
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	a := newLimitedAuthenticator(s, clk)
	cached := validToken(t0, clusterIss)
	if _, err := authFrom(a, cached, "192.0.2.1:1"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < sourceMissBurst; i++ {
		if _, err := authFrom(a, validToken(t0, clusterIss), fmt.Sprintf("192.0.2.1:%d", i)); err != nil {
			t.Fatalf("miss %d of the burst: %v", i, err)
		}
	}
	for _, tc := range []struct {
		name, token, source string
		want                func(error) bool
	}{
		{"source A over its burst", validToken(t0, clusterIss), "192.0.2.1:9", isBusy},
		{"source A over its burst (another port)", validToken(t0, clusterIss), "192.0.2.1:10", isBusy},
		{"source A's cached token", cached, "192.0.2.1:11", func(err error) bool { return err == nil }},
		{"source A's junk", jwt(`{"aud":"another"}`), "192.0.2.1:12", func(err error) bool { return err == ErrUnauthenticated }},
		{"source B's first miss", validToken(t0, clusterIss), "198.51.100.7:1", func(err error) bool { return err == nil }},
		{"IPv6 source C's first miss", validToken(t0, clusterIss), "[2001:db8::1]:443", func(err error) bool { return err == nil }},
	} {
		before := s.count.Load()
		_, err := authFrom(a, tc.token, tc.source)
		if !tc.want(err) {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if reviewed := s.count.Load() != before; reviewed != (err == nil && tc.token != cached) {
			t.Fatalf("%s: reviewed=%v", tc.name, reviewed)
		}
	}
	clk.Step(time.Second) // refills sourceMissRate
	for i := 0; i < sourceMissRate; i++ {
		if _, err := authFrom(a, validToken(clk.Now(), clusterIss), "192.0.2.1:1"); err != nil {
			t.Fatalf("a second later, miss %d: %v", i, err)
		}
	}
	if _, err := authFrom(a, validToken(clk.Now(), clusterIss), "192.0.2.1:1"); !isBusy(err) {
		t.Fatalf("past the refill: %v; want 503", err)
	}
	for i := 0; i < maxSources+100; i++ {
		_, _ = authFrom(a, validToken(clk.Now(), clusterIss), fmt.Sprintf("10.3.%d.%d:1", i/256, i%256))
	}
	if n := a.limits.sources.Len(); n > maxSources {
		t.Fatalf("%d source buckets; bound is %d", n, maxSources)
	}
}

// Issuers are learned from successful reviews, at most maxIssuers of them.
// Until one is known any iss is reviewed; once one is, a token with another
// iss is reviewed only within a global budget (1/s), so a rotated issuer is
// learned, and refused 401 without a review beyond it.
func TestUnknownIssuersAreReviewedWithinABudget(t *testing.T) {
	s := newCountingReviews()
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	a := newLimitedAuthenticator(s, clk)
	issuers := func() []string {
		a.mu.Lock()
		defer a.mu.Unlock()
		return append([]string(nil), a.issuers...)
	}
	type step struct {
		name        string
		advance     time.Duration
		iss         string
		refuse      bool
		wantErr     error
		wantReview  bool
		wantIssuers []string
	}
	for _, st := range []step{
		{"nothing learned: any iss is reviewed", 0, "https://one.example", true, ErrUnauthenticated, true, nil},
		{"nothing learned: another", 0, "https://two.example", true, ErrUnauthenticated, true, nil},
		{"a refusal teaches nothing; a success does", 0, clusterIss, false, nil, true, []string{clusterIss}},
		{"the known issuer needs no budget", 0, clusterIss, false, nil, true, []string{clusterIss}},
		{"an unknown issuer within the budget", 0, "https://attacker.example", true, ErrUnauthenticated, true, []string{clusterIss}},
		{"an unknown issuer over the budget: 401, no review", 0, "https://rotated.example", false, ErrUnauthenticated, false, []string{clusterIss}},
		{"over the budget again", 500 * time.Millisecond, "https://rotated.example", false, ErrUnauthenticated, false, []string{clusterIss}},
		{"a second later: the rotated issuer is reviewed and learned", 500 * time.Millisecond, "https://rotated.example", false, nil, true, []string{"https://rotated.example", clusterIss}},
		{"the rotated issuer is known now", 0, "https://rotated.example", false, nil, true, []string{"https://rotated.example", clusterIss}},
		{"and so is the old one", 0, clusterIss, false, nil, true, []string{clusterIss, "https://rotated.example"}},
		{"third", time.Second, "https://3.example", false, nil, true, []string{"https://3.example", clusterIss, "https://rotated.example"}},
		{"fourth", time.Second, "https://4.example", false, nil, true, []string{"https://4.example", "https://3.example", clusterIss, "https://rotated.example"}},
		{"fifth: the least recently confirmed is forgotten", time.Second, "https://5.example", false, nil, true, []string{"https://5.example", "https://4.example", "https://3.example", clusterIss}},
		{"a forgotten issuer is unknown again (within the budget)", time.Second, "https://rotated.example", false, nil, true, []string{"https://rotated.example", "https://5.example", "https://4.example", "https://3.example"}},
	} {
		clk.Step(st.advance)
		s.refuse.Store(st.refuse)
		before := s.count.Load()
		_, err := authFrom(a, validToken(clk.Now(), st.iss), "127.0.0.1:1")
		if err != st.wantErr {
			t.Fatalf("%s: %v, want %v", st.name, err, st.wantErr)
		}
		if reviewed := s.count.Load() != before; reviewed != st.wantReview {
			t.Fatalf("%s: reviewed = %v, want %v", st.name, reviewed, st.wantReview)
		}
		if got := issuers(); fmt.Sprint(got) != fmt.Sprint(st.wantIssuers) {
			t.Fatalf("%s: issuers %q, want %q", st.name, got, st.wantIssuers)
		}
	}

	t.Run("refusals over the budget take nothing from the source", func(t *testing.T) {
		clk.Step(time.Minute)
		src := "203.0.113.5:1"
		s.refuse.Store(true)
		for i := 0; i < 100; i++ {
			if _, err := authFrom(a, validToken(clk.Now(), "https://attacker.example"), src); err != ErrUnauthenticated {
				t.Fatalf("unknown issuer %d: %v", i, err)
			}
		}
		s.refuse.Store(false)
		for i := 0; i < sourceMissBurst-1; i++ { // the budget's one review took one token
			if _, err := authFrom(a, validToken(clk.Now(), "https://rotated.example"), src); err != nil { // a known issuer
				t.Fatalf("miss %d: %v", i, err)
			}
		}
	})
}
