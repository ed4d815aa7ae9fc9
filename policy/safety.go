package policy

import (
	"fmt"
	"time"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/topology"
)

// SafetyAction is a safety step the controller takes on the data plane.
type SafetyAction int

// Topology actions, in the order they are considered.
const (
	ActionNone SafetyAction = iota
	// ActionResume completes the promotion announced in status.transition:
	// promote its target, then bump the generation and revoke.
	ActionResume
	// ActionRollBack gives up the transition to Site: fence Site read-only
	// first, and only then clear the transition (and so let the old primary
	// be reasserted, or the emergency path decide). The operation that asked
	// for it fails, or, with Readmit, waits for its sites again.
	ActionRollBack
	// ActionBootstrap records the first confirmed primary (generation 1).
	ActionBootstrap
	// ActionFence makes a writable site that is not the active site
	// read-only (a returning old primary).
	ActionFence
	// ActionMarkLost records when the active site was first seen unreachable.
	ActionMarkLost
	// ActionClearLost forgets PrimaryLostAt: the primary answers again.
	ActionClearLost
	// ActionEmergencyPromote promotes Site: the primary has been unreachable
	// for the detection budget.
	ActionEmergencyPromote
	// ActionReassert makes the reachable, read-only active site writable
	// again when no other site is.
	ActionReassert
	// ActionRejoin points a reachable, read-only site that does not
	// replicate (a fenced former primary) at the active site.
	ActionRejoin
)

// SafetyInput is what the safety paths need. It deliberately has no
// deployment leases: emergency failover, fencing and reassertion never read
// them.
type SafetyInput struct {
	Now        time.Time
	ActiveSite string
	// Transition is the persisted, unconfirmed change of active site; nil
	// when none.
	Transition *Transition
	// PrimaryLostAt is the persisted start of the detection budget; zero
	// while the active site is not marked lost.
	PrimaryLostAt time.Time
	// ActiveUnreachableSince is when the active site was first seen
	// unreachable in its current run of failed probes (the prober's
	// memory); zero when unknown. A mark starts the budget from it, so a
	// fleet's queue in front of the mark does not lengthen the budget.
	ActiveUnreachableSince time.Time
	Budget                 time.Duration
	// PromoteTimeout: a transition whose promotion has failed at least
	// MinPromoteFailures times, over at least this long, is rolled back.
	PromoteTimeout time.Duration
	Sites          []topology.SiteState
}

// Transition is what the safety paths need of status.transition.
type Transition struct {
	TargetSite string
	StartedAt  time.Time
	// Failures counts the failed promotion attempts against a reachable
	// target since FailingSince.
	Failures     int32
	FailingSince time.Time
	// Bootstrap transitions are never rolled back: the target is the only
	// writable site, and fencing it would leave the group with none.
	Bootstrap bool
	// Planned: the transition of a planned operation (planned failover,
	// ordered update, restore-in-place), whose promotion fences and
	// confirms every other site first and skips none. It never waits inside
	// its transition: when another site cannot be fenced, it is rolled back
	// at once (ActionRollBack with Readmit), and the emergency path decides.
	Planned bool
}

// MinPromoteFailures is how many promotion attempts must fail before a
// transition may be rolled back.
const MinPromoteFailures = 3

// SafetyDecision is an action, its site, and when to look again.
type SafetyDecision struct {
	Action SafetyAction
	Site   string
	// RequeueAfter, for a lost primary still inside its budget.
	RequeueAfter time.Duration
	// LostAt, for ActionMarkLost: the start of the detection budget, the
	// first failed probe of the current run when known (else Now), rounded
	// up to the second the status stores.
	LostAt time.Time
	// Readmit, for ActionRollBack: the operation that asked for the
	// transition is not failed; it waits for its sites again, as it does
	// when a fence fails before its transition is written (a planned
	// failover returns to Admitting, reason WaitSiteUnreachable, with
	// Reason as its message).
	Readmit bool
	Reason  string
}

// DecideSafety picks the next safety step.
//
// A started transition is never abandoned: it completes (ActionResume), or
// it is rolled back with its target fenced before anything else (the old
// primary included) is made writable again (ActionRollBack). While its
// target cannot be reached, nothing is reopened: the group waits, NoPrimary.
// A planned transition never waits for another site: one the probe finds
// unreachable (so the planned promotion, which skips no site, cannot fence
// it) rolls it back at once, and the emergency path decides from then on.
// An emergency transition is retried, and rolled back only after
// MinPromoteFailures failures over PromoteTimeout.
func DecideSafety(in SafetyInput) SafetyDecision {
	if t := in.Transition; t != nil {
		target := findSite(in.Sites, t.TargetSite)
		var lost string // a site a planned promotion cannot fence
		if t.Planned {
			lost = unreachableOther(in.Sites, t.TargetSite)
		}
		switch {
		case target == nil || !target.Reachable:
			return SafetyDecision{Action: ActionNone, RequeueAfter: 5 * time.Second,
				Reason: fmt.Sprintf("transition to %s waits for its target: no site is reopened until %s is promoted or fenced", t.TargetSite, t.TargetSite)}
		case lost != "":
			return rollBackPlanned(*t, lost, "is unreachable")
		case !t.Bootstrap && t.Failures >= MinPromoteFailures && !t.FailingSince.IsZero() && in.Now.Sub(t.FailingSince) >= in.PromoteTimeout:
			return SafetyDecision{Action: ActionRollBack, Site: t.TargetSite,
				Reason: fmt.Sprintf("promotion of %s failed %d times over %s", t.TargetSite, t.Failures, in.Now.Sub(t.FailingSince).Round(time.Second))}
		}
		return SafetyDecision{Action: ActionResume, Site: t.TargetSite}
	}
	var writable []string
	var active *topology.SiteState
	for i := range in.Sites {
		s := &in.Sites[i]
		if s.Name == in.ActiveSite {
			active = s
		}
		if s.Reachable && s.Writable {
			writable = append(writable, s.Name)
		}
	}
	if in.ActiveSite == "" {
		if len(writable) == 1 {
			return SafetyDecision{Action: ActionBootstrap, Site: writable[0], Reason: "first confirmed primary"}
		}
		return SafetyDecision{Action: ActionNone, Reason: fmt.Sprintf("waiting for exactly one writable site (have %d)", len(writable))}
	}
	for _, w := range writable {
		if w != in.ActiveSite {
			return SafetyDecision{Action: ActionFence, Site: w, Reason: fmt.Sprintf("site %s is writable but %s is the active site", w, in.ActiveSite)}
		}
	}
	if active == nil || !active.Reachable {
		if in.PrimaryLostAt.IsZero() {
			lostAt := in.Now
			if s := in.ActiveUnreachableSince; !s.IsZero() && s.Before(lostAt) {
				lostAt = s
			}
			waited := in.Now.Sub(lostAt)
			// The prober saw every probe fail for the whole budget before
			// this group's turn came (a fleet queued behind a lost site):
			// the mark would only delay the promotion it allows.
			if best := BestSite(in.Sites, in.ActiveSite); waited >= in.Budget && best != "" {
				return SafetyDecision{Action: ActionEmergencyPromote, Site: best,
					Reason: "active site unreachable for the detection budget, since its first failed probe"}
			}
			// The mark is stored to the second (status.primaryLostAt is a
			// metav1.Time): rounded up, so that the stored budget never
			// starts before the failure was seen. At least a millisecond: a
			// spent budget without a candidate is looked at again once the
			// mark is written.
			if frac := lostAt.Sub(lostAt.Truncate(time.Second)); frac > 0 {
				lostAt = lostAt.Add(time.Second - frac)
			}
			return SafetyDecision{Action: ActionMarkLost, LostAt: lostAt,
				RequeueAfter: max(in.Budget-in.Now.Sub(lostAt), time.Millisecond), Reason: "active site unreachable"}
		}
		if waited := in.Now.Sub(in.PrimaryLostAt); waited < in.Budget {
			return SafetyDecision{Action: ActionNone, RequeueAfter: in.Budget - waited, Reason: "active site unreachable, within the detection budget"}
		}
		if best := BestSite(in.Sites, in.ActiveSite); best != "" {
			return SafetyDecision{Action: ActionEmergencyPromote, Site: best, Reason: "active site unreachable for the detection budget"}
		}
		return SafetyDecision{Action: ActionNone, RequeueAfter: 5 * time.Second, Reason: "no reachable site to promote"}
	}
	if !in.PrimaryLostAt.IsZero() {
		return SafetyDecision{Action: ActionClearLost, Reason: "active site answers again"}
	}
	if !active.Writable {
		return SafetyDecision{Action: ActionReassert, Site: in.ActiveSite, Reason: "active site is read-only"}
	}
	for _, s := range in.Sites {
		if s.Name != in.ActiveSite && s.Reachable && !s.Writable && !s.ReplicationRunning {
			return SafetyDecision{Action: ActionRejoin, Site: s.Name, Reason: "fenced site does not replicate"}
		}
	}
	return SafetyDecision{Action: ActionNone}
}

// DecidePromoteFailure decides after a failed attempt to promote the
// persisted transition t. unfenced is the site other than t's target that
// the attempt could not fence and confirm read-only (the site a
// topology.UnreachableError names), "" when the attempt failed otherwise.
// A planned transition that could not fence another site is rolled back at
// once (ActionRollBack with Readmit): planned work never holds emergency
// failover for the promote timeout. Anything else is ActionNone: the
// failure is counted in the transition, and DecideSafety resumes it or,
// after MinPromoteFailures failures over PromoteTimeout, rolls it back.
func DecidePromoteFailure(t Transition, unfenced string) SafetyDecision {
	if t.Planned && unfenced != "" && unfenced != t.TargetSite {
		return rollBackPlanned(t, unfenced, "could not be fenced and confirmed read-only")
	}
	return SafetyDecision{Action: ActionNone}
}

// rollBackPlanned rolls back planned transition t at once because site,
// which its promotion must fence first, what.
func rollBackPlanned(t Transition, site, what string) SafetyDecision {
	return SafetyDecision{Action: ActionRollBack, Site: t.TargetSite, Readmit: true,
		Reason: fmt.Sprintf("site %s %s during the planned promotion of %s: a planned operation never waits inside a persisted transition, so it is rolled back (%s fenced read-only) and the operation waits for its sites again; if %s stays unreachable, the emergency path decides after its detection budget",
			site, what, t.TargetSite, t.TargetSite, site)}
}

// unreachableOther is the first site but target, in spec order, that the
// probe found unreachable; "" when none.
func unreachableOther(sites []topology.SiteState, target string) string {
	for _, s := range sites {
		if s.Name != target && !s.Reachable {
			return s.Name
		}
	}
	return ""
}

// BestSite is the one rule for choosing a site to promote: the reachable
// site other than exclude (the current or lost primary) that replicates, with
// the least lag; a reachable site that does not replicate only when none
// does; spec order breaks ties. "" when no other site is reachable. Planned
// operations still pass their choice through SiteReady, which refuses a
// target that does not replicate.
func BestSite(sites []topology.SiteState, exclude string) string {
	best := -1
	for i, s := range sites {
		if !s.Reachable || s.Name == exclude {
			continue
		}
		if best < 0 || better(s, sites[best]) {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	return sites[best].Name
}

func better(a, b topology.SiteState) bool {
	if a.ReplicationRunning != b.ReplicationRunning {
		return a.ReplicationRunning
	}
	return a.LagSeconds < b.LagSeconds
}

func findSite(sites []topology.SiteState, name string) *topology.SiteState {
	for i := range sites {
		if sites[i].Name == name {
			return &sites[i]
		}
	}
	return nil
}

// AutomaticFailoverHeld tells whether a planned failover holds the emergency
// path, and why: only while it is Promoting. A merely Deferred failover never
// does, or a failover-hold would delay emergency failover indirectly.
func AutomaticFailoverHeld(pf *bloodravenv1alpha1.PlannedFailoverStatus) (bool, string) {
	if pf != nil && pf.Phase == bloodravenv1alpha1.PlannedFailoverPhasePromoting {
		return true, "PlannedFailoverPromoting"
	}
	return false, "NoPlannedFailover"
}

// SiteReady tells whether site can take a planned promotion: reachable and,
// unless it already is the primary, replicating.
func SiteReady(sites []topology.SiteState, site, active string) (bool, string) {
	for _, s := range sites {
		if s.Name != site {
			continue
		}
		switch {
		case !s.Reachable:
			return false, fmt.Sprintf("target site %s is unreachable", site)
		case site != active && !s.ReplicationRunning:
			return false, fmt.Sprintf("target site %s is not replicating", site)
		}
		return true, ""
	}
	return false, fmt.Sprintf("target site %s is not a site of the group", site)
}

// Reasons a planned operation waits before admission.
const (
	WaitTargetNotReady  = "TargetNotReady"
	WaitSiteUnreachable = "SiteUnreachable"
	// WaitFenceFailed: every site answered the probe, but fencing them, or
	// the target's catching up with them, failed.
	WaitFenceFailed = "FenceFailed"
)

// MaxPlannedLagSeconds is the most replication lag a planned promotion's
// target may have: the old primary is read-only from the moment it is
// fenced until the target has applied everything it wrote, so a target far
// behind would stop writes for as long as it takes to catch up (and fail the
// bounded wait). A lagging target waits until it catches up.
const MaxPlannedLagSeconds = 5

// PlannedReady tells whether a planned operation may move the primary from
// active to target now: the target is SiteReady, and every other site of the
// group is reachable, so it can be fenced read-only and confirmed before the
// transition is written. A planned path never skips a site it cannot reach:
// that site may still be writable for its own clients. When not ready it
// returns the reason (WaitTargetNotReady, WaitSiteUnreachable) and a message
// naming the site. Only the emergency path, after its detection budget,
// promotes past an unreachable site.
func PlannedReady(sites []topology.SiteState, target, active string) (ok bool, reason, message string) {
	// An unreachable site comes first: it is what the operation waits for,
	// and it often explains the rest (a target that replicates from an
	// unreachable primary stops replicating).
	for _, s := range sites {
		if s.Name != target && !s.Reachable {
			return false, WaitSiteUnreachable, fmt.Sprintf("site %s is unreachable: a planned operation fences every other site read-only before it promotes %s, and waits until it can", s.Name, target)
		}
	}
	if ok, why := SiteReady(sites, target, active); !ok {
		if s := findSite(sites, target); s != nil && !s.Reachable {
			return false, WaitSiteUnreachable, why
		}
		return false, WaitTargetNotReady, why
	}
	if s := findSite(sites, target); target != active && s.LagSeconds > MaxPlannedLagSeconds {
		return false, WaitTargetNotReady, fmt.Sprintf("target site %s lags %.0f s behind (at most %d s for a planned promotion): waits until it catches up", target, s.LagSeconds, MaxPlannedLagSeconds)
	}
	return true, "", ""
}

// ConditionValue is one computed condition.
type ConditionValue struct {
	Type    string
	True    bool
	Reason  string
	Message string
}

// ObserveHealth turns a probe into status.health and the conditions Ready,
// Degraded, SplitBrain and NoPrimary.
func ObserveHealth(activeSite string, sites []topology.SiteState) (bloodravenv1alpha1.Health, []ConditionValue) {
	var h bloodravenv1alpha1.Health
	var writable, down, notReplicating []string
	var activeOK bool
	replicas := 0
	for _, s := range sites {
		switch {
		case !s.Reachable:
			down = append(down, s.Name)
			continue
		case s.Writable:
			writable = append(writable, s.Name)
		}
		if s.Name == activeSite {
			activeOK = s.Writable
			continue
		}
		replicas++
		if !s.ReplicationRunning {
			notReplicating = append(notReplicating, s.Name)
		}
		h.ReplicationLagSeconds = max(h.ReplicationLagSeconds, s.LagSeconds)
	}
	split := len(writable) > 1
	noPrimary := activeSite == "" || !activeOK
	h.Ready = !noPrimary && !split
	h.ReplicationRunning = len(notReplicating) == 0 && len(down) == 0
	h.RecoveryPending = len(writable) > 0 && !contains(writable, activeSite) || split
	switch {
	case len(down) > 0:
		h.DegradedReason = fmt.Sprintf("SitesUnreachable: %v", down)
	case len(notReplicating) > 0:
		h.DegradedReason = fmt.Sprintf("ReplicationStopped: %v", notReplicating)
	}
	conds := []ConditionValue{
		{Type: bloodravenv1alpha1.ConditionReady, True: h.Ready, Reason: boolReason(h.Ready, "PrimaryWritable", "NotReady")},
		{Type: bloodravenv1alpha1.ConditionDegraded, True: h.DegradedReason != "", Reason: boolReason(h.DegradedReason != "", "Degraded", "AllSitesHealthy"), Message: h.DegradedReason},
		{Type: bloodravenv1alpha1.ConditionSplitBrain, True: split, Reason: boolReason(split, "MultipleWritableSites", "SingleWriter"), Message: fmt.Sprintf("writable sites: %v", writable)},
		{Type: bloodravenv1alpha1.ConditionNoPrimary, True: noPrimary, Reason: boolReason(noPrimary, "NoConfirmedPrimary", "PrimaryConfirmed")},
	}
	return h, conds
}

func boolReason(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
