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
)

// installWebhooks registers the generated webhook configuration
// (config/webhook) with the API server, pointed at the operator's TLS
// listener on loopback and trusting the playground CA.
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
	_, port, err := net.SplitHostPort(p.cfg.TLSAddr)
	if err != nil {
		return fmt.Errorf("TLS address %q: %w", p.cfg.TLSAddr, err)
	}
	for i := range cfg.Webhooks {
		w := &cfg.Webhooks[i]
		url := "https://127.0.0.1:" + port + *w.ClientConfig.Service.Path
		w.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM}
	}
	if err := c.Create(ctx, cfg); err != nil {
		return fmt.Errorf("create webhook configuration: %w", err)
	}
	p.logf(">> validating webhooks registered (%d)", len(cfg.Webhooks))
	return nil
}
