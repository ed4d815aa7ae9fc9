// Package wire is the one definition of the /deploy/v1 bodies: the request
// bodies a pipeline sends, the lease, grant and group answers, and the error
// body with its codes. The operator encodes its answers with these types
// and decodes its requests through them; the client, the CLI, the test
// scenes and the benchmark decode with them. docs/api.md and the OpenAPI
// document (docs/openapi.yaml) are tested against these types, so a field
// added here and not there fails a test.
//
// It imports the standard library only, so that the client module keeps
// its promise of stdlib and cobra.
//
// It guarantees names and JSON shapes, nothing else: what a code means and
// when it is sent is the server's (deployapi) and the contract's
// (docs/api.md). The server decodes two members its own way (ttlSeconds
// takes any integer and clamps it; phase tells an empty string from an
// absent member) by shadowing them in its request types; the member names
// stay these.
package wire
