// Package kubectlplugin is `kubectl bloodraven`, for the people on call: it
// reads what the operator wrote (the group's status, the deployment Lease
// records) with the user's kubeconfig, and writes only what a person may
// ask for (the revoke annotation, spec.plannedFailover, the
// schema-verified annotation). It needs no deploy token and never prints a
// token or a token's hash.
//
//   - status GROUP: the observation: active site, generation, conditions,
//     the planned operation and its admission, who holds the mutex and the
//     holds;
//   - leases GROUP: every deployment Lease record of the group;
//   - revoke GROUP: sets bloodraven.shipstream.io/revoke-deployment-leases
//     and waits until the operator has revoked and removed it;
//   - failover GROUP --to SITE: requests a planned failover and follows it,
//     showing Deferred with the blocking hold and its retry time;
//   - verify DATABASE OPERATION: after a person checked the schema a lost
//     migration may have half-applied, sets
//     bloodraven.shipstream.io/schema-verified=OPERATION (only if that is
//     the operation the database's gate waits on) and waits until the
//     operator has opened the gate.
//
// It does not verify the records' MACs: the key is the operator's alone. A
// record shows what is stored; the operator ignores a forged one (docs).
package kubectlplugin
