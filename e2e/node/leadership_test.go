package nodesuite

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/mariadblocal"
	"github.com/shipstream/bloodraven/internal/node"
	"github.com/shipstream/bloodraven/internal/scene"
	"github.com/shipstream/bloodraven/internal/testenv"
	bloodravenscheme "github.com/shipstream/bloodraven/scheme"
)

// runScene is a group a pipeline namespace migrates: two MariaDB sites on
// the node's address, the group, a database listing ServiceAccount deploy,
// the listener's CA as ConfigMap bloodraven-ca, and on iad the table runs
// that `migrate hold` records its intervals in.
type runScene struct {
	ns    string
	iad   *mariadblocal.Server
	ports [2]int
	// tokenSeconds is the expirationSeconds of the runs' projected tokens
	// (3600 when zero).
	tokenSeconds int64
}

const (
	sceneUser, scenePassword = "bloodraven", "change-me"
	sceneGroup, sceneDB      = "app", "app-db"
)

func newRunScene(t *testing.T, ns string, ca []byte) *runScene {
	t.Helper()
	ctx := context.Background()
	rs := &runScene{ns: ns, ports: [2]int{testenv.FreePort(t), testenv.FreePort(t)}}
	rs.iad = startSites(t, rs.ports, sceneUser, scenePassword)
	root, err := rs.iad.Root()
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, q := range []string{"CREATE DATABASE suite",
		"CREATE TABLE suite.runs (id BIGINT AUTO_INCREMENT PRIMARY KEY, op VARCHAR(200), started DATETIME(6), ended DATETIME(6))"} {
		if _, err := root.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	namespace(t, ns, map[string]string{"shipstream.io/mysql-client": "true"})
	c, err := client.New(nd.Admin, client.Options{Scheme: bloodravenscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	g := scene.Group(ns, sceneGroup,
		bloodravenv1alpha1.Site{Name: "iad", Host: node.NodeIP, Port: int32(rs.ports[0])},
		bloodravenv1alpha1.Site{Name: "pdx", Host: node.NodeIP, Port: int32(rs.ports[1])})
	g.Spec.CredentialsSecretRef = &bloodravenv1alpha1.SecretReference{Name: "mysql"}
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mysql", Namespace: ns},
			StringData: map[string]string{"username": sceneUser, "password": scenePassword}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deploy", Namespace: ns}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bloodraven-ca", Namespace: ns}, Data: map[string]string{"ca.crt": string(ca)}},
		g,
		scene.Database(ns, sceneDB, sceneGroup, bloodravenv1alpha1.DeploymentClient{Namespace: ns, ServiceAccount: "deploy"}),
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	waitBootstrapped(t, ns, sceneGroup)
	return rs
}

// runPod starts `bloodraven-deploy run` of operation op in a Pod as the
// README's Job does (the Pod label the NetworkPolicy admits, ServiceAccount
// deploy, a kubelet-projected token with audience bloodraven-deploy, the
// CA from the ConfigMap), around `migrate hold`.
func (rs *runScene) runPod(t *testing.T, op string, ttl int, hold time.Duration) *corev1.Pod {
	t.Helper()
	tokenSeconds := rs.tokenSeconds
	if tokenSeconds == 0 {
		tokenSeconds = 3600
	}
	dsn := fmt.Sprintf("%s:%s@tcp(%s:%d)/suite", sceneUser, scenePassword, node.NodeIP, rs.ports[0])
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: op, Namespace: rs.ns, Labels: map[string]string{"bloodraven.shipstream.io/deploy-client": "true"}},
		Spec: corev1.PodSpec{
			RestartPolicy:      corev1.RestartPolicyNever,
			ServiceAccountName: "deploy",
			Containers: []corev1.Container{{
				Name: "migrate", Image: importJobImage(t), ImagePullPolicy: corev1.PullNever,
				Command: []string{"bloodraven-deploy"},
				Args: []string{"run", "--group=" + sceneGroup, "--instance=" + sceneDB, "--operation-id=" + op,
					fmt.Sprintf("--ttl=%d", ttl), "--wait=5m", "--", "migrate", "hold", hold.String(), op},
				Env: []corev1.EnvVar{
					{Name: "BLOODRAVEN_DEPLOY_SERVER", Value: "https://bloodraven.bloodraven.svc:8443"},
					{Name: "BLOODRAVEN_DEPLOY_CA", Value: "/var/run/deploy/ca.crt"},
					{Name: "BLOODRAVEN_DEPLOY_TOKEN_FILE", Value: "/var/run/deploy/token"},
					{Name: "MIGRATE_RECORD_DSN", Value: dsn},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "deploy", MountPath: "/var/run/deploy", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "deploy", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "bloodraven-deploy", ExpirationSeconds: ptr.To(tokenSeconds), Path: "token"}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "bloodraven-ca"},
						Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				}}}}},
		},
	}
	created, err := kube.CoreV1().Pods(rs.ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// waitRuns waits until every Pod of ops has ended and fails the test for
// each that did not exit 0, with its log.
func (rs *runScene) waitRuns(t *testing.T, timeout time.Duration, ops ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, op := range ops {
		for {
			p, err := kube.CoreV1().Pods(rs.ns).Get(context.Background(), op, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Status.Phase == corev1.PodSucceeded {
				break
			}
			if p.Status.Phase == corev1.PodFailed || time.Now().After(deadline) {
				t.Fatalf("run %s: phase %s at %s, want Succeeded (exit 0); its log:\n%s", op, p.Status.Phase, time.Now().Format(time.TimeOnly), rs.runLog(op))
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// runLog is the log of op's Pod, with timestamps (what a failed test shows).
func (rs *runScene) runLog(op string) string {
	out, _ := shErr(time.Minute, fmt.Sprintf("kubectl --namespace %s logs --timestamps %s", rs.ns, op))
	return out
}

// interval is one command's run, by the database's clock.
type interval struct {
	op         string
	start, end time.Time
	ended      bool
}

// intervals reads what `migrate hold` recorded, and fails the test if two
// commands ran at once or one never ended.
func (rs *runScene) checkIntervals(t *testing.T, want int) []interval {
	t.Helper()
	db, err := rs.iad.Root()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query("SELECT op, started, ended FROM suite.runs ORDER BY started")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []interval
	for rows.Next() {
		var iv interval
		var start, end []byte
		if err := rows.Scan(&iv.op, &start, &end); err != nil {
			t.Fatal(err)
		}
		iv.start, _ = time.Parse("2006-01-02 15:04:05.999999", string(start))
		if end != nil {
			iv.end, _ = time.Parse("2006-01-02 15:04:05.999999", string(end))
			iv.ended = true
		}
		got = append(got, iv)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Slice(got, func(i, j int) bool { return got[i].start.Before(got[j].start) })
	if len(got) != want {
		t.Errorf("%d commands ran, want %d: %v", len(got), want, got)
	}
	for i, iv := range got {
		if !iv.ended {
			t.Errorf("the command of %s never ended", iv.op)
		}
		if i > 0 && iv.start.Before(got[i-1].end) {
			t.Errorf("the commands of %s (%s–%s) and %s (%s–%s) overlap", got[i-1].op, got[i-1].start.Format(time.StampMicro),
				got[i-1].end.Format(time.StampMicro), iv.op, iv.start.Format(time.StampMicro), iv.end.Format(time.StampMicro))
		}
	}
	return got
}

// leaderPod is the release's running Pod that carries the leader label
// (the leader-only Service's selector), if exactly one does.
func leaderPod(t *testing.T) (name, ip string) {
	t.Helper()
	pods := operatorPodList(t, ",bloodraven.shipstream.io/leader=true")
	if len(pods) != 1 {
		return "", ""
	}
	return pods[0].Name, pods[0].Status.PodIP
}

// serviceEndpoints are the ready addresses behind Service name.
func serviceEndpoints(t *testing.T, name string) []string {
	t.Helper()
	slices, err := kube.DiscoveryV1().EndpointSlices(releaseNS).List(context.Background(), metav1.ListOptions{
		LabelSelector: "kubernetes.io/service-name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				out = append(out, e.Addresses...)
			}
		}
	}
	sort.Strings(out)
	return out
}

// waitNewLeader waits until a Pod other than old leads and the leader-only
// Service routes to it alone.
func waitNewLeader(t *testing.T, old string, timeout time.Duration) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		name, ip := leaderPod(t)
		if name != "" && name != old && ip != "" {
			if eps := serviceEndpoints(t, release); len(eps) == 1 && eps[0] == ip {
				return name, time.Since(start)
			}
		}
		if time.Since(start) > timeout {
			t.Fatalf("no new leader behind Service %s %s after the leader %s went (leader now %q, endpoints %v)",
				release, timeout, old, name, serviceEndpoints(t, release))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The leader Pod deleted while a run holds the mutex (ttl 30 s) and
// another waits for it: the follower takes over, the leader-only Service
// routes to it, both runs exit 0, and their commands never overlap.
func testALeaderPodDeletedDuringARunHandsOverThroughTheService(t *testing.T) {
	tls := ensureChart(t)
	rs := newRunScene(t, "lead", tls.CA.CertPEM)
	oldLeader, _ := leaderPod(t)
	if oldLeader == "" {
		t.Fatal("no Pod carries the leader label")
	}
	rs.runPod(t, "run-a", 30, 25*time.Second)
	// run-a's command has started (it holds the mutex) before run-b asks.
	waitStarted(t, rs, "run-a")
	rs.runPod(t, "run-b", 30, 3*time.Second)
	// run-b asks, and waits behind run-a, before the leader goes.
	waitLog(t, rs.ns, "run-b", "acquiring the migration mutex")
	oldLog := followLog(t, oldLeader)
	if err := kube.CoreV1().Pods(releaseNS).Delete(context.Background(), oldLeader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	newLeader, took := waitNewLeader(t, oldLeader, 2*time.Minute)
	t.Logf("leader %s deleted; %s leads and the Service routes to it alone after %.1f s", oldLeader, newLeader, took.Seconds())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the deleted leader's log:\n%s", tail(oldLog(), 60))
		}
	})
	rs.waitRuns(t, 4*time.Minute, "run-a", "run-b")
	for _, iv := range rs.checkIntervals(t, 2) {
		t.Logf("%s ran %s – %s", iv.op, iv.start.Format(time.StampMilli), iv.end.Format(time.StampMilli))
	}
	sh(t, 4*time.Minute, fmt.Sprintf("kubectl --namespace %s rollout status deployment/%s --timeout=4m", releaseNS, release))
}

// A rolling restart of the release (kubectl rollout restart) under 10
// concurrent runs of one group: every run exits 0 (no lease lost, no error
// past the client's retries) and no two commands overlap.
func testARollingRestartUnderTenRunsLosesNoLease(t *testing.T) {
	tls := ensureChart(t)
	rs := newRunScene(t, "restart", tls.CA.CertPEM)
	var ops []string
	for i := range 10 {
		op := fmt.Sprintf("run-%02d", i)
		ops = append(ops, op)
		rs.runPod(t, op, 30, 2*time.Second)
	}
	waitStarted(t, rs, "")
	before := operatorPods(t)
	start := time.Now()
	sh(t, time.Minute, fmt.Sprintf("kubectl --namespace %s rollout restart deployment/%s", releaseNS, release))
	sh(t, 4*time.Minute, fmt.Sprintf("kubectl --namespace %s rollout status deployment/%s --timeout=4m", releaseNS, release))
	after := operatorPods(t)
	t.Logf("rolling restart took %.1f s: replicas %v replaced by %v", time.Since(start).Seconds(), before, after)
	for _, p := range before {
		if slices.Contains(after, p) {
			t.Fatalf("replica %s survived the rolling restart (after: %v)", p, after)
		}
	}
	rs.waitRuns(t, 5*time.Minute, ops...)
	got := rs.checkIntervals(t, len(ops))
	if len(got) > 0 {
		t.Logf("10 runs, one after another, from %s to %s", got[0].start.Format(time.StampMilli), got[len(got)-1].end.Format(time.StampMilli))
	}
}

// waitStarted waits until op's command (any command, when op is empty) has
// recorded its start.
func waitStarted(t *testing.T, rs *runScene, op string) {
	t.Helper()
	db, err := rs.iad.Root()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var n int
		q, args := "SELECT COUNT(*) FROM suite.runs", []any{}
		if op != "" {
			q, args = q+" WHERE op = ?", append(args, op)
		}
		if err := db.QueryRow(q, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no command of %q started within 2 minutes", op)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// followLog streams pod's log (kubectl logs -f) from now on; the returned
// function gives what arrived so far. A deleted Pod's log is gone with it.
func followLog(t *testing.T, pod string) func() string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var mu sync.Mutex
	var buf strings.Builder
	cmd := exec.CommandContext(ctx, filepath.Join(root, "bin", "kubectl"), "--namespace", releaseNS, "logs", "-f", "--timestamps", pod)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+nd.Layout().Kubeconfig())
	w := writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	})
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait() }()
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return buf.String()
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// operatorPods are the names of the release's running operator Pods.
func operatorPods(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, p := range operatorPodList(t, "") {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return names
}

// operatorPodList is the release's operator Pods (not helm test's) that
// run and are not being deleted, narrowed by the label selector more
// (",key=value").
func operatorPodList(t *testing.T, more string) []corev1.Pod {
	t.Helper()
	pods, err := kube.CoreV1().Pods(releaseNS).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=bloodraven,app.kubernetes.io/component!=test" + more})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, p)
		}
	}
	return out
}

// waitLog waits until pod ns/name's log contains want.
func waitLog(t *testing.T, ns, name, want string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, _ := shErr(time.Minute, fmt.Sprintf("kubectl --namespace %s logs %s", ns, name))
		if strings.Contains(out, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s did not log %q within 2 minutes:\n%s", ns, name, want, tail(out, 20))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
