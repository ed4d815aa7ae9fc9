// Package soak runs the end-to-end soak: twenty `bloodraven deploy run`
// clients against the operator binary, for 80 s in `make test` and five
// minutes in `make soak` (BLOODRAVEN_SOAK_DURATION; see e2e/doc.go).
// It is its own package so that `go test ./...` runs it beside the rest of
// the suite: it waits far more than it computes.
package soak
