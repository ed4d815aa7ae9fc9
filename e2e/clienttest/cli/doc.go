// Package cli tests the pipeline CLI (`bloodraven deploy`, the same command
// tree as bloodraven-deploy) as a separate process against the real
// operator: exit codes, one runner at a time, revocations stopping the
// command within 1.5 s, leader routing behind a per-connection balancer,
// the fallback against an older operator, and the recipes of
// examples/pipelines. It holds tests only.
package cli
