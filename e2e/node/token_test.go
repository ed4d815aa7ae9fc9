package nodesuite

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/clusterenv"
	"github.com/shipstream/bloodraven/internal/node"
	"github.com/shipstream/bloodraven/internal/scene"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
)

const (
	// minTokenSeconds is the shortest expirationSeconds a projected
	// ServiceAccount token may ask for (the API server refuses less). The
	// kubelet replaces the token once 80% of that has passed (less a
	// jitter of up to 10 s), at its next sync of the Pod.
	minTokenSeconds = 600
	// tokenLeeway is how long after its exp the API server still accepts
	// a ServiceAccount token (go-jose's jwt.DefaultLeeway, which the
	// TokenReview's validator uses).
	tokenLeeway = time.Minute
)

// projectedToken is one token the kubelet wrote into a Pod's projected
// volume, as the suite saw it. The token stays in memory: the suite logs
// its times, never the token or a hash of it.
type projectedToken struct {
	raw      []byte
	seen     time.Time // when the suite first read it
	iat, exp time.Time // its claims
}

// tokenWatch reads a Pod's projected token file every second and keeps each
// distinct token it finds, in order.
type tokenWatch struct {
	mu     sync.Mutex
	tokens []projectedToken
	errs   []string
	stop   context.CancelFunc
	done   chan struct{}
}

// watchToken follows the file the kubelet projects path (in volume
// volume) into the Pod whose UID is uid.
func watchToken(uid, volume, path string) *tokenWatch {
	file := filepath.Join(node.KubeletRootDir(), "pods", uid, "volumes", "kubernetes.io~projected", volume, path)
	ctx, cancel := context.WithCancel(context.Background())
	w := &tokenWatch{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			if b, err := os.ReadFile(file); err == nil && len(b) > 0 {
				w.add(b, time.Now())
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *tokenWatch) add(b []byte, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.tokens); n > 0 && bytes.Equal(w.tokens[n-1].raw, b) {
		return
	}
	iat, exp, err := tokenTimes(b)
	if err != nil {
		w.errs = append(w.errs, fmt.Sprintf("token %d: %v", len(w.tokens)+1, err))
		return
	}
	w.tokens = append(w.tokens, projectedToken{raw: bytes.Clone(b), seen: now, iat: iat, exp: exp})
}

// Tokens are the distinct tokens seen so far, and what could not be read.
func (w *tokenWatch) Tokens() ([]projectedToken, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]projectedToken(nil), w.tokens...), append([]string(nil), w.errs...)
}

// Stop ends the watch.
func (w *tokenWatch) Stop() {
	w.stop()
	<-w.done
}

// tokenTimes are a JWT's iat and exp claims (its payload decoded, its
// signature not checked: the API server does that).
func tokenTimes(jwt []byte) (iat, exp time.Time, err error) {
	parts := strings.Split(strings.TrimSpace(string(jwt)), ".")
	if len(parts) != 3 {
		return iat, exp, fmt.Errorf("not a JWT (%d parts)", len(parts))
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return iat, exp, fmt.Errorf("payload: %w", err)
	}
	var claims struct {
		IAT int64 `json:"iat"`
		EXP int64 `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return iat, exp, fmt.Errorf("claims: %w", err)
	}
	if claims.IAT == 0 || claims.EXP == 0 {
		return iat, exp, fmt.Errorf("claims lack iat or exp")
	}
	return time.Unix(claims.IAT, 0), time.Unix(claims.EXP, 0), nil
}

// A run whose Pod's token lives the shortest time a projected token may
// (10 minutes) holds the mutex for longer than that token is accepted
// (its exp, plus the API server's minute of leeway, plus the lease's
// ttl): the kubelet writes a new token into the Pod meanwhile, the first
// token is refused once it has expired, and the run still exits 0, its
// DeployRun succeeded. A client that read its token once would have lost
// the lease (its renewals refused 401) before its command ended. The
// suite reads the projected file from the host every second to see the
// kubelet replace it.
func testARunOutlivesAKubeletTokenRotation(t *testing.T, tls clusterenv.ListenerCA) {
	const ttl = 30
	rs := newRunScene(t, "rotation", tls.CA.CertPEM)
	rs.tokenSeconds = minTokenSeconds
	// The first token is issued before the command starts: holding for
	// its whole life, the leeway, the ttl and 25 s more outlives it.
	hold := minTokenSeconds*time.Second + tokenLeeway + ttl*time.Second + 25*time.Second
	const op = "long-run"
	pod := rs.runPod(t, op, ttl, hold)
	w := watchToken(string(pod.UID), "deploy", "token")
	defer w.Stop()

	// Once the first token is past its exp and the leeway, the deployment
	// API refuses it, while the run goes on renewing.
	first := waitFirstToken(t, w, 2*time.Minute)
	t.Logf("first token: issued %s, expires %s (%.0f s)", first.iat.Format(time.TimeOnly), first.exp.Format(time.TimeOnly), first.exp.Sub(first.iat).Seconds())
	rs.whileRunning(t, op, first.exp.Add(tokenLeeway+2*time.Second))
	api := apiFromHost(t, tls.CA.CertPEM, rs.ns)
	stale := scene.ForURL(apiURL, hostHTTP(t, tls.CA.CertPEM), strings.TrimSpace(string(first.raw)))
	expectStatus(t, stale, "the first token, expired", http.StatusUnauthorized, "unauthenticated")
	expectStatus(t, api, "a fresh token", http.StatusOK, "")

	rs.waitRuns(t, hold+3*time.Minute, op)
	w.Stop()
	tokens, errs := w.Tokens()
	for _, e := range errs {
		t.Errorf("the projected token file: %s", e)
	}
	ivs := rs.checkIntervals(t, 1)
	if len(ivs) != 1 || len(tokens) == 0 {
		return
	}
	cmd := ivs[0]
	t.Logf("the command ran %s – %s (%.0f s)", cmd.start.Format(time.TimeOnly), cmd.end.Format(time.TimeOnly), cmd.end.Sub(cmd.start).Seconds())
	for i, tok := range tokens {
		t.Logf("token %d: seen %s, issued %s (%.0f s after the first), expires %s", i+1, tok.seen.Format(time.TimeOnly),
			tok.iat.Format(time.TimeOnly), tok.iat.Sub(tokens[0].iat).Seconds(), tok.exp.Format(time.TimeOnly))
	}
	if len(tokens) < 2 {
		t.Fatalf("the kubelet never replaced the Pod's token (%d seen over %.0f s)", len(tokens), cmd.end.Sub(cmd.start).Seconds())
	}
	second := tokens[1]
	if !second.seen.After(cmd.start) || !second.seen.Before(cmd.end) {
		t.Errorf("the kubelet replaced the token at %s, outside the command's run", second.seen.Format(time.TimeOnly))
	}
	if !second.seen.Before(tokens[0].exp) {
		t.Errorf("the kubelet replaced the token at %s, after it expired at %s", second.seen.Format(time.TimeOnly), tokens[0].exp.Format(time.TimeOnly))
	}
	if limit := tokens[0].exp.Add(tokenLeeway + ttl*time.Second); !cmd.end.After(limit) {
		t.Errorf("the command ended at %s, before a client holding the first token would have lost the lease (%s): the run shows nothing",
			cmd.end.Format(time.TimeOnly), limit.Format(time.TimeOnly))
	}

	c, err := client.New(nd.Admin, client.Options{Scheme: bloodravenscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	var runs bloodravenv1alpha1.DeployRunList
	if err := c.List(context.Background(), &runs, client.InNamespace(rs.ns)); err != nil {
		t.Fatal(err)
	}
	if len(runs.Items) != 1 || runs.Items[0].Spec.OperationID != op || runs.Items[0].Status.Outcome != bloodravenv1alpha1.DeployRunSucceeded {
		t.Errorf("want one DeployRun of %s, succeeded; got %d: %+v", op, len(runs.Items), runs.Items)
	}
}

// whileRunning waits until until, failing the test as soon as op's Pod
// has ended.
func (rs *runScene) whileRunning(t *testing.T, op string, until time.Time) {
	t.Helper()
	for time.Now().Before(until) {
		p, err := kube.CoreV1().Pods(rs.ns).Get(context.Background(), op, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			t.Fatalf("run %s ended (%s) at %s, too early; its log:\n%s", op, p.Status.Phase, time.Now().Format(time.TimeOnly), rs.runLog(op))
		}
		time.Sleep(2 * time.Second)
	}
}

// waitFirstToken waits until the watch has seen a token.
func waitFirstToken(t *testing.T, w *tokenWatch, timeout time.Duration) projectedToken {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		tokens, errs := w.Tokens()
		if len(errs) > 0 {
			t.Fatalf("the projected token file: %v", errs)
		}
		if len(tokens) > 0 {
			return tokens[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no projected token within %s", timeout)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// expectStatus GETs the run scene's group with api and wants status (and,
// for an error, the contract's error string). It asks again, as a client
// does, while the connection fails or the answer is 503 (a replica that
// does not lead, or none behind the Service for a moment).
func expectStatus(t *testing.T, api *scene.Client, what string, status int, errString string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := api.Send(http.MethodGet, "/deploy/v1/groups/"+sceneGroup, nil)
		if (err != nil || r.Status == http.StatusServiceUnavailable) && time.Now().Before(deadline) {
			time.Sleep(500 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("GET the group with %s: %v", what, err)
		}
		if r.Status != status || (errString != "" && r.Str("error") != errString) {
			t.Errorf("GET the group with %s: %d %s, want %d %s", what, r.Status, r.Raw, status, errString)
			return
		}
		t.Logf("GET the group with %s: %d", what, r.Status)
		return
	}
}
