// Package server holds the operator's listeners other than the ones
// controller-runtime owns (metrics on :8080, probes on :8081).
//
//   - The auxiliary plain-HTTP listener (default :8082) serves a small status
//     page. It never serves the deployment API: every path under /deploy/
//     answers 404 with a JSON body, whatever the method, so a misconfigured
//     client fails loudly instead of sending bearer tokens in clear.
//   - The TLS listener (BLOODRAVEN_ESCROW_TLS_ADDR, default :8443) is
//     controller-runtime's webhook server: one listener for the validating
//     webhooks and /deploy/v1. Its certificate and key are read from a
//     directory and reloaded when the files change (fsnotify, with a 10 s poll
//     as a backstop), so a rotated Secret needs no restart.
//   - Leadership is read from the manager's election (Elected channel), never
//     guessed; LeaderState reports it to handlers.
//
// Not guaranteed: the status page is informational and unauthenticated; it
// carries no secrets and no per-group data.
package server
