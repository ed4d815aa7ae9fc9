package charts

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The plain /metrics names every tenant's groups (the bloodraven_group_*
// series carry each group's namespace and name), so the chart's default is
// the secure endpoint: the operator is told --metrics-secure (HTTPS with the
// listener's certificate, which the Pod mounts; TokenReview and a
// SubjectAccessReview on the non-resource URL /metrics), the ClusterRole a
// scraper is bound to renders, and the metrics Service says https. Plain
// HTTP is what metrics.secure=false asks for, explicitly.
func TestTheDefaultServesMetricsSecurely(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sets   []string
		secure bool
	}{
		{"default", nil, true},
		{"namespaced", []string{watchNamespaces}, true},
		{"metrics.secure=false", []string{"metrics.secure=false"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(t, tc.sets...)
			if err != nil {
				t.Fatal(err)
			}
			objs := docs(t, out)
			spec := podSpec(t, objs)
			containers, _, _ := unstructured.NestedSlice(spec, "containers")
			c, _ := containers[0].(map[string]any)
			args, _, _ := unstructured.NestedStringSlice(c, "args")
			if got := slices.Contains(args, "--metrics-secure"); got != tc.secure {
				t.Errorf("--metrics-secure in the operator's args: %v, want %v (%q)", got, tc.secure, args)
			}
			if tc.secure {
				// The metrics server reads the certificate of --tls-cert-dir:
				// the listener's Secret must be mounted there.
				if mounts := fmt.Sprint(c["volumeMounts"]); !strings.Contains(mounts, "/etc/bloodraven/tls") {
					t.Errorf("secure metrics without the listener's certificate mounted: %s", mounts)
				}
			}

			readers := findNamed(objs, "ClusterRole", "bloodraven-metrics-reader")
			if !tc.secure {
				if len(readers) != 0 {
					t.Errorf("metrics.secure=false rendered %d metrics-reader ClusterRoles", len(readers))
				}
			} else {
				if len(readers) != 1 {
					t.Fatalf("%d ClusterRoles bloodraven-metrics-reader, want 1", len(readers))
				}
				var cr rbacv1.ClusterRole
				typed(t, readers[0], &cr)
				want := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}
				if fmt.Sprint(cr.Rules) != fmt.Sprint(want) {
					t.Errorf("metrics-reader rules %+v, want %+v (get on the non-resource URL /metrics, nothing else)", cr.Rules, want)
				}
			}

			svc := findNamed(objs, "Service", "bloodraven-metrics")
			if len(svc) != 1 {
				t.Fatalf("%d Services bloodraven-metrics", len(svc))
			}
			ports, _, _ := unstructured.NestedSlice(svc[0].Object, "spec", "ports")
			p, _ := ports[0].(map[string]any)
			if p["name"] != "metrics" || fmt.Sprint(p["port"]) != "8080" || p["targetPort"] != "metrics" {
				t.Errorf("metrics Service port %v", p)
			}
			if got := p["appProtocol"] == "https"; got != tc.secure {
				t.Errorf("metrics Service port appProtocol %v, want https: %v", p["appProtocol"], tc.secure)
			}
		})
	}
}
