package server

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shipstream/bloodraven/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

// A replica labels its own Pod a follower at once and the leader once
// elected, so a Service selecting the label reaches only the leader.
func TestTheLeaderLabelsItsOwnPod(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bloodraven-0", Namespace: ns, Labels: map[string]string{LeaderLabel: "true"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "operator", Image: "bloodraven"}}}}
	if _, err := env.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	label := func() string {
		p, err := env.Kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Labels[LeaderLabel]
	}
	waitLabel := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for label() != want {
			if time.Now().After(deadline) {
				t.Fatalf("the Pod's %s is %q, want %q", LeaderLabel, label(), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	elected, stop, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	defer close(stop)
	go func() { defer close(done); LabelLeader(env.Kube, ns, pod.Name, elected, stop, logr.Discard()) }()
	// A restarted replica keeps its Pod's labels: a stale "true" from the
	// process that led before is cleared first.
	waitLabel("false")
	close(elected)
	waitLabel("true")
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("LabelLeader did not return once the leader label was written")
	}
}
