// Package authn authenticates the callers of the deployment API: a bearer
// token is a Kubernetes ServiceAccount token, and a TokenReview of the API
// server for the API's audience decides it. Only a ServiceAccount
// (system:serviceaccount:<namespace>:<name>) is an Identity.
//
// Guarantees: a token is accepted only when a TokenReview accepted it for
// our audience, within the cache's ttl and never past the token's own exp
// claim; what unauthenticated callers can make the API server do is bounded
// (local refusal of what cannot pass, a budget for unknown issuers, a rate
// per source address, a bound on reviews in flight: see Authenticator);
// concurrent requests with one token share one review; no token, its hash
// or an Authorization header is logged or returned in an error. Every time
// read goes through the injected clock.
//
// Not guaranteed: that an accepted identity may act on anything. That is
// authorization, the deployment API's (deployapi/authz.go), decided on the
// MysqlDatabases' deployment clients.
package authn
