// Package pki makes a throw-away certificate authority and serving
// certificates for the playground (`make dev`) and for tests.
//
// Guarantees: keys are ECDSA P-256 from crypto/rand; serving certificates
// carry exactly the DNS names and IP addresses asked for; files are written
// with mode 0600 for keys, and atomically (write to a temporary file, rename)
// so a watcher never reads half a certificate.
//
// Not for production: there is no revocation, no renewal and no protection of
// the CA key beyond file permissions. Production installs bring their own
// Secret (see the Helm chart).
package pki
