// Package soak runs the end-to-end soak: twenty `bloodraven deploy run`
// clients against the operator binary for five minutes (see e2e/doc.go).
// It is its own package so that `go test ./...` runs it beside the rest of
// the suite: it waits far more than it computes.
package soak
