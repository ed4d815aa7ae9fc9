// Package gate writes the schema-verification gate of a MysqlDatabase
// (docs/leases.md, "Verification gate"; docs/leases.md, "The verification
// gate"): Close records that a migration operation ended after its DDL
// boundary without confirming its end, and Read reports what a migration
// grant must know of it.
//
// Guarantees:
//   - Close decides on a fresh read and writes with that read's
//     resourceVersion (policy.CloseGate decides), so it never overwrites an
//     operation already pending, and never re-closes the gate for an
//     operation a person verified. It is idempotent; whoever notices first
//     (the deployment API before it takes the mutex over, or the group
//     controller's bookkeeping) writes it, and the database controller
//     announces it once.
//   - Read is fresh: a grant decided on it is not fooled by a cache that
//     has not seen a gate just closed.
//
// It does not open the gate: the database controller does, on the
// schema-verified annotation (policy.OpenGate).
//
// Its tests live with its writers and reader (controllers' and deployapi's
// gate_test.go, e2e's gate_test.go): what they hold is who closes the gate
// when, and that a grant reads it fresh, against a real API server.
package gate
