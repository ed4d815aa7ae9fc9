// Package kubectlplugin is `kubectl bloodraven`, for the people on call: it
// reads what the operator wrote (the group's status, the deployment Lease
// records) with the user's kubeconfig, and writes only what a person may
// ask for (the revoke annotation, spec.plannedFailover, the
// schema-verified annotation). It needs no deploy token and never prints a
// token or a token's hash.
//
//   - status [GROUP]: the observation: active site, generation, conditions,
//     the planned operation and its admission, who holds the mutex and the
//     holds;
//   - leases [GROUP]: every deployment Lease record of the group (without
//     GROUP, of every group of the namespace; with -A, of every namespace);
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
// It takes kubectl's flags (cli-runtime's ConfigFlags), -o json|yaml and
// -A on the reads (StatusView, LeaseView), --dry-run=server on revoke and
// failover, --version, and completes group, database, operation and site
// names (complete.go; kubectl runs the kubectl_complete-bloodraven shim).
// Each kind of outcome has its exit code (ExitCode, docs/operator.md).
//
// It does not verify the records' MACs: the key is the operator's alone. A
// record shows what is stored; the operator ignores a forged one (docs).
package kubectlplugin
