package server

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// DefaultTLSAddr is the TLS listener's address when BLOODRAVEN_ESCROW_TLS_ADDR
// is unset.
const DefaultTLSAddr = ":8443"

// TLSListenerOptions turns the TLS listener address and certificate directory
// into the options of controller-runtime's webhook server, which is the
// operator's single TLS listener. certDir must hold tls.crt and tls.key (the
// layout of a kubernetes.io/tls Secret); they are reloaded when they change.
func TLSListenerOptions(addr, certDir string) (webhook.Options, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return webhook.Options{}, fmt.Errorf("TLS listener address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return webhook.Options{}, fmt.Errorf("TLS listener address %q: port must be 1-65535", addr)
	}
	return webhook.Options{
		Host:     host,
		Port:     port,
		CertDir:  certDir,
		CertName: "tls.crt",
		KeyName:  "tls.key",
		TLSOpts: []func(*tls.Config){func(c *tls.Config) {
			c.MinVersion = tls.VersionTLS12
			// controller-runtime offers only h2; also offer http/1.1 so
			// clients that advertise only it (many HTTP libraries) are not
			// refused during the ALPN handshake.
			c.NextProtos = []string{"h2", "http/1.1"}
		}},
	}, nil
}
