package policy

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/topology"
)

// TopologyAction is a safety step the controller takes on the data plane.
type TopologyAction int

// Topology actions, in the order they are considered.
const (
	ActionNone TopologyAction = iota
	// ActionResume finishes the promotion announced in status.transition.
	ActionResume
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

// TopologyInput is what the safety paths need. It deliberately has no
// deployment leases: emergency failover, fencing and reassertion never read
// them.
type TopologyInput struct {
	Now           time.Time
	ActiveSite    string
	Transition    bool
	PrimaryLostAt *metav1.Time
	Budget        time.Duration
	Sites         []topology.SiteState
}

// TopologyDecision is an action, its site, and when to look again.
type TopologyDecision struct {
	Action TopologyAction
	Site   string
	// RequeueAfter, for a lost primary still inside its budget.
	RequeueAfter time.Duration
	Reason       string
}

// DecideTopology picks the next safety step.
func DecideTopology(in TopologyInput) TopologyDecision {
	if in.Transition {
		return TopologyDecision{Action: ActionResume}
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
			return TopologyDecision{Action: ActionBootstrap, Site: writable[0], Reason: "first confirmed primary"}
		}
		return TopologyDecision{Action: ActionNone, Reason: fmt.Sprintf("waiting for exactly one writable site (have %d)", len(writable))}
	}
	for _, w := range writable {
		if w != in.ActiveSite {
			return TopologyDecision{Action: ActionFence, Site: w, Reason: fmt.Sprintf("site %s is writable but %s is the active site", w, in.ActiveSite)}
		}
	}
	if active == nil || !active.Reachable {
		if in.PrimaryLostAt == nil {
			return TopologyDecision{Action: ActionMarkLost, RequeueAfter: in.Budget, Reason: "active site unreachable"}
		}
		if waited := in.Now.Sub(in.PrimaryLostAt.Time); waited < in.Budget {
			return TopologyDecision{Action: ActionNone, RequeueAfter: in.Budget - waited, Reason: "active site unreachable, within the detection budget"}
		}
		if best := bestCandidate(in.Sites, in.ActiveSite); best != "" {
			return TopologyDecision{Action: ActionEmergencyPromote, Site: best, Reason: "active site unreachable for the detection budget"}
		}
		return TopologyDecision{Action: ActionNone, RequeueAfter: 5 * time.Second, Reason: "no reachable site to promote"}
	}
	if in.PrimaryLostAt != nil {
		return TopologyDecision{Action: ActionClearLost, Reason: "active site answers again"}
	}
	if !active.Writable {
		return TopologyDecision{Action: ActionReassert, Site: in.ActiveSite, Reason: "active site is read-only"}
	}
	for _, s := range in.Sites {
		if s.Name != in.ActiveSite && s.Reachable && !s.Writable && !s.ReplicationRunning {
			return TopologyDecision{Action: ActionRejoin, Site: s.Name, Reason: "fenced site does not replicate"}
		}
	}
	return TopologyDecision{Action: ActionNone}
}

// bestCandidate is the reachable site, other than the lost one, with the
// least lag; replicating sites first; spec order breaks ties.
func bestCandidate(sites []topology.SiteState, lost string) string {
	best := -1
	for i, s := range sites {
		if !s.Reachable || s.Name == lost {
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

// ConditionValue is one computed condition.
type ConditionValue struct {
	Type    string
	True    bool
	Reason  string
	Message string
}

// Observe turns a probe into status.health and the conditions Ready,
// Degraded, SplitBrain and NoPrimary.
func Observe(activeSite string, sites []topology.SiteState) (v1.Health, []ConditionValue) {
	var h v1.Health
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
		{Type: v1.ConditionReady, True: h.Ready, Reason: boolReason(h.Ready, "PrimaryWritable", "NotReady")},
		{Type: v1.ConditionDegraded, True: h.DegradedReason != "", Reason: boolReason(h.DegradedReason != "", "Degraded", "AllSitesHealthy"), Message: h.DegradedReason},
		{Type: v1.ConditionSplitBrain, True: split, Reason: boolReason(split, "MultipleWritableSites", "SingleWriter"), Message: fmt.Sprintf("writable sites: %v", writable)},
		{Type: v1.ConditionNoPrimary, True: noPrimary, Reason: boolReason(noPrimary, "NoConfirmedPrimary", "PrimaryConfirmed")},
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
