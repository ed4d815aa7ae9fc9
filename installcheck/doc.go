// Package installcheck is what `helm test` runs against an installed
// release (`bloodraven check-install`, from the operator's own image): the
// checks a platform team would otherwise make by hand after an install or an
// upgrade.
//
// It guarantees, when Run returns nil:
//   - the leader-only Service answers /status, with the version and
//     leader: true (a leader is elected and reachable);
//   - the API server calls the validating webhooks and they decide: a
//     dry-run create of a MysqlFailoverGroup whose planned failover names a
//     site it does not have is denied by the webhook (not by the schema, and
//     not by a TLS or connection failure, which it reports with the likely
//     cause: an empty caBundle, the NetworkPolicy, no ready replica);
//   - the status is guarded against anyone but the operator: a dry-run
//     status patch of an existing group (a condition, no fence field), by
//     the caller's identity, is refused; run as the operator's own identity
//     it is admitted and the check fails. Without any group in the namespace
//     this check is reported as skipped, not passed.
//
// It does not write anything: every request is a GET or a dry run.
package installcheck
