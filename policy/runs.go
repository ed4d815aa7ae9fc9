package policy

import (
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
)

// RunStatus is the DeployRun status of rec's operation at now, given the
// status recorded so far (prev; zero when none). It is a projection of the
// migration record, the one source of truth: running while the record is
// live; once it has ended, the client's reported outcome or, without one,
// the lease's end. The start is kept from prev: a re-grant continues the
// run.
//
// A record read from a cache may be older than the status already written
// by another writer; it never moves the run back: an ended run stays ended
// unless the record is a later tenure (taken again after the run's end), a
// reported outcome is never dropped, and the phase only moves forward.
func RunStatus(prev bloodravenv1alpha1.DeployRunStatus, rec *leases.Record, now time.Time) bloodravenv1alpha1.DeployRunStatus {
	if runBehind(prev, rec, now) {
		return prev
	}
	phase := rec.Phase.Effective()
	if p, ok := leases.ParsePhase(prev.Phase); ok && p.After(phase) {
		phase = p
	}
	out := bloodravenv1alpha1.DeployRunStatus{Phase: string(phase), StartTime: prev.StartTime}
	if out.StartTime == nil {
		out.StartTime = microTime(tenureStart(rec))
	}
	var end time.Time
	switch {
	case rec.Live(now):
		out.Outcome = bloodravenv1alpha1.DeployRunRunning
		return out
	case rec.State == leases.StateReleased:
		out.LeaseEnd, end = bloodravenv1alpha1.LeaseReleased, rec.EndedAt
		if end.IsZero() {
			end = rec.RenewedAt
		}
	case rec.State == leases.StateRevoked:
		out.LeaseEnd, end = bloodravenv1alpha1.LeaseRevoked, rec.RevokedAt
		out.RevocationReason, out.RevokedAtGeneration = rec.Reason, rec.RevokedAtGeneration
	default: // active past its expiry, or recorded expired
		out.LeaseEnd, end = bloodravenv1alpha1.LeaseExpired, rec.ExpiresAt
	}
	out.EndTime = microTime(end)
	out.Outcome = bloodravenv1alpha1.DeployRunOutcome(out.LeaseEnd)
	if rec.Outcome != "" {
		out.Outcome = bloodravenv1alpha1.DeployRunOutcome(rec.Outcome)
	}
	return out
}

// runBehind tells whether rec is older than what prev records.
func runBehind(prev bloodravenv1alpha1.DeployRunStatus, rec *leases.Record, now time.Time) bool {
	if prev.LeaseEnd == "" {
		return false // running (or new): any record is as new
	}
	if rec.Live(now) {
		if prev.LeaseEnd == bloodravenv1alpha1.LeaseExpired && prev.EndTime != nil && rec.ExpiresAt.After(prev.EndTime.Time) {
			// Renewed past the expiry recorded: that expiry was judged on a
			// record older than the renewal (a take-over or expiry that
			// then lost its compare-and-swap), and the run goes on.
			return false
		}
		return prev.EndTime != nil && !tenureStart(rec).After(prev.EndTime.Time)
	}
	_, reported := leases.ParseOutcome(string(prev.Outcome))
	return reported && rec.Outcome == ""
}

// tenureStart is when rec's unbroken tenure of the mutex began.
func tenureStart(rec *leases.Record) time.Time { return rec.TenureStart() }

// RunReported is st with the outcome its client reported after its record
// was replaced (the report could not go on the record): only an ended run
// that carries no report yet takes it.
func RunReported(st bloodravenv1alpha1.DeployRunStatus, outcome leases.Outcome) (bloodravenv1alpha1.DeployRunStatus, bool) {
	if _, reported := leases.ParseOutcome(string(st.Outcome)); reported || st.LeaseEnd == "" || outcome == "" {
		return st, false
	}
	st.Outcome = bloodravenv1alpha1.DeployRunOutcome(outcome)
	return st, true
}

// RunBackstopDelay is how old a migration record's tenure must be before
// the group controller writes a DeployRun the deployment API did not: the
// API writes its run once a grant is confirmed, milliseconds after the
// record, and a record younger than this may belong to a grant about to be
// withdrawn (which leaves no run).
const RunBackstopDelay = leases.ConfirmWindow

// RunBackstopDue tells whether the group controller may create the missing
// DeployRun of rec at now.
func RunBackstopDue(rec *leases.Record, now time.Time) bool {
	return !now.Before(tenureStart(rec).Add(RunBackstopDelay))
}

// RunLost is the status of a run still recorded running whose operation's
// record was replaced (another operation took the lapsed mutex) before the
// operator saw how it ended: it ended, at an unknown time, in an unknown
// way. A run that already ended is returned unchanged.
func RunLost(prev bloodravenv1alpha1.DeployRunStatus) bloodravenv1alpha1.DeployRunStatus {
	if prev.Outcome != bloodravenv1alpha1.DeployRunRunning && prev.Outcome != "" {
		return prev
	}
	prev.Outcome, prev.LeaseEnd = bloodravenv1alpha1.DeployRunUnknown, bloodravenv1alpha1.LeaseUnknown
	return prev
}

// RunDisplaced tells whether the run of operation op, recorded in st, was
// displaced by current, the group's migration record: st still says
// running, and current's tenure (another operation's, or a later tenure of
// op, which has a run of its own) began after the run did. A cached current older than the run (the run's grant
// not seen yet) displaces nothing.
func RunDisplaced(op string, st bloodravenv1alpha1.DeployRunStatus, current *leases.Record) bool {
	return st.Outcome == bloodravenv1alpha1.DeployRunRunning && current != nil && st.StartTime != nil &&
		st.StartTime.Before(microTime(tenureStart(current)))
}

// RunView is what pruning needs of a DeployRun.
type RunView struct {
	Name, Instance string
	Start          time.Time
	Running        bool
}

// RunsToPrune names the DeployRuns to delete so that at most history are
// kept per instance: the oldest ended runs first (by start, then name). A
// running run is never pruned, and counts toward the history.
func RunsToPrune(runs []RunView, history int) []string {
	if history < 1 {
		history = 1
	}
	byInstance := map[string][]RunView{}
	for _, r := range runs {
		byInstance[r.Instance] = append(byInstance[r.Instance], r)
	}
	var out []string
	for _, rs := range byInstance {
		if len(rs) <= history {
			continue
		}
		sort.Slice(rs, func(i, j int) bool {
			if !rs[i].Start.Equal(rs[j].Start) {
				return rs[i].Start.Before(rs[j].Start)
			}
			return rs[i].Name < rs[j].Name
		})
		excess := len(rs) - history
		for _, r := range rs {
			if excess == 0 {
				break
			}
			if !r.Running {
				out = append(out, r.Name)
				excess--
			}
		}
	}
	sort.Strings(out)
	return out
}

func microTime(t time.Time) *metav1.MicroTime {
	if t.IsZero() {
		return nil
	}
	return &metav1.MicroTime{Time: t.Truncate(time.Microsecond)} // what the API server stores
}

// RunConditions is st with the standard conditions of its outcome at now
// (Ready, Reconciling, Stalled, as kstatus reads them) and
// observedGeneration set to generation. A condition whose status does not
// change keeps its lastTransitionTime.
//
//	running (or no outcome yet): Reconciling True; Ready and Stalled False
//	succeeded, released:         Ready True; Reconciling and Stalled False
//	any other end:               Stalled True; Ready and Reconciling False
//
// A run released without a report counts as done: every failure the
// client knows of is reported (bloodraven-deploy always reports).
func RunConditions(st bloodravenv1alpha1.DeployRunStatus, generation int64, now time.Time) bloodravenv1alpha1.DeployRunStatus {
	st.ObservedGeneration = generation
	st.Conditions = append([]metav1.Condition(nil), st.Conditions...)
	ready, reconciling, stalled := metav1.ConditionFalse, metav1.ConditionFalse, metav1.ConditionFalse
	reason, message := runReason(st.Outcome), runMessage(st)
	switch st.Outcome {
	case bloodravenv1alpha1.DeployRunRunning, "":
		reconciling = metav1.ConditionTrue
	case bloodravenv1alpha1.DeployRunSucceeded, bloodravenv1alpha1.DeployRunReleased:
		ready = metav1.ConditionTrue
	default:
		stalled = metav1.ConditionTrue
	}
	at := metav1.NewTime(now)
	for _, c := range []struct {
		t string
		s metav1.ConditionStatus
	}{{bloodravenv1alpha1.DeployRunReady, ready}, {bloodravenv1alpha1.DeployRunReconciling, reconciling}, {bloodravenv1alpha1.DeployRunStalled, stalled}} {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: c.t, Status: c.s, ObservedGeneration: generation,
			Reason: reason, Message: message, LastTransitionTime: at})
	}
	return st
}

// runReason is the conditions' reason for an outcome: the outcome in
// CamelCase (Running, Succeeded, LostAfterDDL, Revoked, ...).
func runReason(o bloodravenv1alpha1.DeployRunOutcome) string {
	if o == "" {
		o = bloodravenv1alpha1.DeployRunRunning
	}
	var b strings.Builder
	for _, part := range strings.Split(string(o), "-") {
		switch part {
		case "ddl":
			b.WriteString("DDL")
		case "":
		default:
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}

// runMessage says what the outcome means for a person gating on it.
func runMessage(st bloodravenv1alpha1.DeployRunStatus) string {
	phase := st.Phase
	if phase == "" {
		phase = string(leases.PhasePreDDL)
	}
	switch st.Outcome {
	case bloodravenv1alpha1.DeployRunRunning, "":
		return "the operation holds the migration mutex (phase " + phase + ")"
	case bloodravenv1alpha1.DeployRunSucceeded:
		return "the operation reported success and released the mutex"
	case bloodravenv1alpha1.DeployRunReleased:
		return "the operation released the mutex without reporting an outcome"
	case bloodravenv1alpha1.DeployRunRevoked:
		return "the migration lease was revoked (" + st.RevocationReason + ") at phase " + phase
	case bloodravenv1alpha1.DeployRunLostAfterDDL:
		return "the operation lost its authority past its DDL boundary: its database is gated until a person verifies the schema"
	default:
		return "the operation ended " + string(st.Outcome) + " at phase " + phase
	}
}
