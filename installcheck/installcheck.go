package installcheck

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// Config is one run's targets.
type Config struct {
	// StatusURL is the leader-only Service's /status, e.g.
	// http://bloodraven.bloodraven.svc:8082/status.
	StatusURL string
	// Namespace holds the dry-run group and the groups whose status patch
	// must be refused; the caller needs create on mysqlfailovergroups and
	// patch on mysqlfailovergroups/status there (dry runs need the same
	// RBAC as writes).
	Namespace string
	Client    client.Client
	HTTP      *http.Client
	// Out receives one line per check.
	Out io.Writer
}

// Run makes every check and returns the first failure, after reporting
// each check on Out.
func Run(ctx context.Context, c Config) error {
	checks := []struct {
		name string
		run  func(context.Context, Config) (string, error)
	}{
		{"status", checkStatus},
		{"webhooks", checkWebhookDecides},
		{"status-guard", checkStatusGuard},
	}
	var first error
	for _, ch := range checks {
		msg, err := untilDecided(ctx, c, ch.run)
		if err != nil {
			fmt.Fprintf(c.Out, "FAIL %s: %v\n", ch.name, err)
			if first == nil {
				first = fmt.Errorf("%s: %w", ch.name, err)
			}
			continue
		}
		fmt.Fprintf(c.Out, "ok   %s: %s\n", ch.name, msg)
	}
	return first
}

// untilDecided runs check again, once a second until ctx ends, while the
// API server could not call the webhooks at all: right after a rollout the
// webhooks' Service may not route to the new Pods yet (kube-proxy and the
// NetworkPolicy engine program them a moment later), which is not the
// misconfiguration the check looks for. Any other answer is final.
func untilDecided(ctx context.Context, c Config, check func(context.Context, Config) (string, error)) (string, error) {
	for {
		msg, err := check(ctx, c)
		if err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
			return msg, err
		}
		select {
		case <-ctx.Done():
			return msg, err
		case <-time.After(time.Second):
		}
	}
}

func checkStatus(ctx context.Context, c Config) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.StatusURL, nil)
	if err != nil {
		return "", fmt.Errorf("status URL: %w", err)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w (no ready leader behind the Service?)", c.StatusURL, err)
	}
	defer resp.Body.Close()
	var s struct {
		Version string `json:"version"`
		Leader  bool   `json:"leader"`
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s answered %s", c.StatusURL, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&s); err != nil {
		return "", fmt.Errorf("GET %s: not the status JSON: %w", c.StatusURL, err)
	}
	if s.Version == "" || !s.Leader {
		return "", fmt.Errorf("GET %s: version %q, leader %v: the Service must reach the elected leader", c.StatusURL, s.Version, s.Leader)
	}
	return fmt.Sprintf("the leader answers, version %s", s.Version), nil
}

// probeGroupName names the dry-run group; nothing is ever stored under it.
const probeGroupName = "bloodraven-install-check"

func checkWebhookDecides(ctx context.Context, c Config) (string, error) {
	g := &bloodravenv1alpha1.MysqlFailoverGroup{
		ObjectMeta: metav1.ObjectMeta{Name: probeGroupName, Namespace: c.Namespace},
		Spec: bloodravenv1alpha1.MysqlFailoverGroupSpec{
			Sites: []bloodravenv1alpha1.Site{{Name: "a", Host: "a.invalid", Port: 3306}, {Name: "b", Host: "b.invalid", Port: 3306}},
			// The schema accepts any name; only the webhook knows the sites.
			PlannedFailover: &bloodravenv1alpha1.PlannedFailoverRequest{ID: "install-check", TargetSite: "nowhere"},
		},
	}
	err := c.Client.Create(ctx, g, client.DryRunAll)
	switch {
	case err == nil:
		return "", fmt.Errorf("a dry-run group whose planned failover names no site of its own was admitted: the validating webhooks are not installed or do not decide")
	case strings.Contains(err.Error(), "denied the request"):
		return "the API server calls them and they decide (a bad planned failover was denied)", nil
	default:
		return "", fmt.Errorf("the API server could not get a decision: %w; %s", err, hint(err))
	}
}

// checkStatusGuard patches a condition only the operator may write (no
// fence field: even the operator moves the fence only by its rules, so a
// generation bump would be refused for either identity and tell nothing).
func checkStatusGuard(ctx context.Context, c Config) (string, error) {
	var groups bloodravenv1alpha1.MysqlFailoverGroupList
	if err := c.Client.List(ctx, &groups, client.InNamespace(c.Namespace), client.Limit(1)); err != nil {
		return "", fmt.Errorf("list groups in %s: %w", c.Namespace, err)
	}
	if len(groups.Items) == 0 {
		return fmt.Sprintf("skipped: no MysqlFailoverGroup in %s to try a status patch on", c.Namespace), nil
	}
	g := &groups.Items[0]
	patch := client.MergeFrom(g.DeepCopy())
	meta.SetStatusCondition(&g.Status.Conditions, metav1.Condition{Type: "InstallCheck", Status: metav1.ConditionTrue,
		Reason: "HelmTest", Message: "a dry run by bloodraven check-install; never stored", ObservedGeneration: g.Generation})
	err := c.Client.Status().Patch(ctx, g, patch, client.DryRunAll)
	switch {
	case err == nil:
		return "", fmt.Errorf("a dry-run status patch of %s/%s by this identity was admitted: the status is not guarded against it (is this the operator's own identity?)", g.Namespace, g.Name)
	case strings.Contains(err.Error(), "denied the request"):
		return fmt.Sprintf("a status patch of %s/%s by another identity than the operator's is refused", g.Namespace, g.Name), nil
	default:
		return "", fmt.Errorf("status patch of %s/%s: %w; %s", g.Namespace, g.Name, err, hint(err))
	}
}

// hint names the usual cause of a webhook call that got no decision.
func hint(err error) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "x509"):
		return "the API server does not trust the webhooks' certificate: webhooks.caBundle is empty or wrong (or cert-manager has not injected it yet)"
	case strings.Contains(s, "connection refused"), strings.Contains(s, "no endpoints"):
		return "no ready replica serves the webhooks"
	case strings.Contains(s, "deadline exceeded"), strings.Contains(s, "timeout"):
		return "the API server cannot reach the webhooks: check the NetworkPolicy's apiServerSources"
	case strings.Contains(s, "forbidden"):
		return "this identity lacks RBAC for the dry run (the chart's test Role grants it)"
	}
	return "see docs/troubleshooting.md, The webhooks are unreachable"
}
