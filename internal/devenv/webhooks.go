package devenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/shipstream/bloodraven/webhook"
)

// FenceGuardName is the fence guard's name, as the chart names it for a
// release called bloodraven.
const FenceGuardName = "bloodraven-fence-guard"

// installWebhooks registers the generated webhook configuration
// (config/webhook) with the API server, pointed at the operator's TLS
// listener on loopback (or cfg.WebhookAddr) and trusting the playground CA.
// As the chart does, every webhook skips the operator's own identity (the
// ServiceAccount the operator runs as), and the fence guard holds the
// operator's fence moves to the rules instead: the operator's writes never
// wait on its webhooks.
func (p *Playground) installWebhooks(ctx context.Context, c client.Client) error {
	data, err := os.ReadFile(filepath.Join(p.cfg.Root, "config", "webhook", "manifests.yaml"))
	if err != nil {
		return fmt.Errorf("webhook configuration: %w", err)
	}
	caPEM, err := os.ReadFile(p.Paths.CACert)
	if err != nil {
		return err
	}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := yaml.UnmarshalStrict(data, cfg); err != nil {
		return fmt.Errorf("webhook configuration: %w", err)
	}
	cfg.Name = "bloodraven"
	addr := p.cfg.WebhookAddr
	if addr == "" {
		_, port, err := net.SplitHostPort(p.cfg.TLSAddr)
		if err != nil {
			return fmt.Errorf("TLS address %q: %w", p.cfg.TLSAddr, err)
		}
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	for i := range cfg.Webhooks {
		w := &cfg.Webhooks[i]
		url := "https://" + addr + *w.ClientConfig.Service.Path
		w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM}
	}
	webhook.ExemptTheOperator(cfg, OperatorIdentity())
	policy, binding := webhook.FenceGuard(webhook.FenceGuardOptions{Name: FenceGuardName, OperatorUsername: OperatorIdentity()})
	for _, o := range []client.Object{policy, binding, cfg} {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
	}
	p.logf(">> validating webhooks registered (%d), skipped by %s, whose fence moves %s checks", len(cfg.Webhooks), OperatorIdentity(), FenceGuardName)
	return nil
}
