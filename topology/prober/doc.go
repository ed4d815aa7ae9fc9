// Package prober watches the data plane of every group the controller
// reconciles, one endpoint (a site of one group) at a time, so that a site
// that hangs costs only its own probes and never a controller worker.
//
// Guarantees:
//   - every probe is bounded by topology.ProbeTimeout, and at most Parallel
//     probes are in flight; one background probe per endpoint at a time;
//   - the active site of every tracked group, and every site last seen
//     dead, is probed in the background every Interval; a change of
//     reachability (the primary lost, a lost site answering again) is handed
//     to Notify, which the controller turns into an immediate, high-priority
//     reconcile of that group;
//   - Probe, the reconcile's one probe, probes every site at once. It
//     reports a site probed within the last Interval (Interval +
//     ProbeTimeout while a background probe of it is under way) as that
//     probe saw it (the background keeps the active site's result that
//     young), unless
//     the controller acted on the group since (Invalidate); it reports
//     unreachable, without dialing, a site seen dead within
//     2 × (Interval + ProbeTimeout) whose return the background prober has
//     not seen yet. Every other site is dialed. So no answer is older than
//     Interval + ProbeTimeout, and a hung site costs the reconcile nothing;
//   - of two probes of one endpoint that overlap (a reconcile's and the
//     background's, or two reconciles'), the result of the one that started
//     last is kept: each probe is numbered when it starts, and a result
//     older than the one stored is dropped, so a slow probe finishing late
//     never puts back what the site was before (a returned site remembered
//     dead, say). A probe of an endpoint replaced meanwhile (a new address)
//     or forgotten stores nothing;
//   - endpoints are keyed by group UID and site: two groups that name the
//     same host share nothing.
//
// Not guaranteed: that a site reported unreachable is dead (the controller
// waits the detection budget before an emergency promotion, and fences a
// returning primary first), nor that a change is noticed faster than
// Interval plus the probe's own time. The planned path does not use Dead:
// it fences and confirms every site itself and skips none.
package prober
