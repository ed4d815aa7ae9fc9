package server

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// LeaderLabel is the label the operator keeps on its own Pod: "true" on the
// elected leader, "false" on every other replica. The chart's Service of
// the spec's address (bloodraven.<ns>.svc:8443) selects "true", so the
// deployment API's callers reach the leader and never a follower; the
// webhooks have their own Service over every ready replica.
const LeaderLabel = "bloodraven.shipstream.io/leader"

// LabelLeader marks the Pod namespace/pod as a follower at once, and as the
// leader once elected closes; it retries each write until it lands or stop
// closes, and returns when the leader label is written (or stop). A replica
// that loses its lease exits (controller-runtime), and its restart writes
// "false" again: the label never claims leadership past the process that
// won it, except while a partitioned old leader cannot reach the API
// server, and then it answers 503 not_leader itself. Routing therefore
// follows a leader change within a readiness period, not at once.
func LabelLeader(kube kubernetes.Interface, namespace, pod string, elected, stop <-chan struct{}, log logr.Logger) {
	set := func(v string) bool {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{LeaderLabel: v}}})
		for attempt := 0; ; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := kube.CoreV1().Pods(namespace).Patch(ctx, pod, types.MergePatchType, patch, metav1.PatchOptions{})
			cancel()
			if err == nil {
				log.Info("leader label set on this Pod", "pod", namespace+"/"+pod, "label", LeaderLabel, "value", v)
				return true
			}
			if attempt%10 == 0 {
				log.Error(fmt.Errorf("label Pod %s/%s %s=%s: %w", namespace, pod, LeaderLabel, v, err), "retrying")
			}
			select {
			case <-stop:
				return false
			case <-time.After(min(time.Duration(attempt+1)*200*time.Millisecond, 5*time.Second)):
			}
		}
	}
	select {
	case <-elected: // elected before the first write: say so at once
	default:
		if !set("false") {
			return
		}
	}
	select {
	case <-elected:
		set("true")
	case <-stop:
	}
}
