// Package policy holds Bloodraven's decisions as pure functions: given an
// input gathered by I/O code (and the time, passed in), return a decision.
// Nothing here reads a clock, a client or the environment, so every rule is
// table-tested without a server.
//
// Guarantees: the functions are deterministic and total (every input has an
// answer, no panics). Not guaranteed: that the input is fresh — callers gather
// it, and the fence (status.topologyGeneration with resourceVersion
// preconditions in the API server) is what makes a stale decision harmless.
package policy
