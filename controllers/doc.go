// Package controllers holds the MysqlFailoverGroup controller: it keeps the
// topology bookkeeping (active site, the topologyGeneration fence), runs the
// planned operations behind the admission gate, takes the safety paths, and
// revokes deployment leases.
//
// Each reconcile gathers (the group read fresh from the API server, a probe
// of the data plane, the group's deployment leases read fresh), decides with
// the pure functions of package policy, and acts in small steps whose
// progress is persisted in status, so a restart resumes where it stopped:
//
//   - revocation: the revoke annotation revokes every live lease
//     (operator_revoked) and is removed; a live lease granted under another
//     generation is revoked (topology_changed); an active lease past its
//     expiry is marked expired. One DeploymentLeaseRevoked Event per batch.
//   - safety paths (policy.DecideTopology, which takes no leases): resume an
//     announced promotion, bootstrap, fence a returning old primary,
//     emergency failover after the detection budget, reassert the primary.
//   - planned failover, ordered update, restore-in-place: policy.Admit defers
//     them behind a live failover-hold (Deferred/DeploymentHold, retryTime =
//     earliest hold expiry, Event PlannedFailoverDeferred, counter +1 per
//     deferral); admitted, they persist status.reservation, re-check holds,
//     and only then act.
//   - every authoritative change of active site goes through promote: mark
//     status.transition (the deployment API answers 423 while it stands),
//     act on the data plane, then write activeSite and topologyGeneration+1
//     in one status update and revoke the leases it fenced.
//
// Guarantees: one status write carries each generation bump; a hold and an
// admission never both proceed (each side writes its own marker, then reads
// the other's); emergency failover, fencing and reassertion never read a
// deployment lease. Not guaranteed: timeliness under API-server outage — the
// controller acts only on what it could read and persist.
package controllers
