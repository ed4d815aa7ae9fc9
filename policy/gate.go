package policy

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
)

// The schema-verification gate (docs/gate.md): a migration that ended after
// its DDL boundary, without confirming its end, closes its database's gate;
// a person opens it with the schema-verified annotation. These are the pure
// decisions on a MysqlDatabase's status; the deployment API and the
// controllers write what they return.

// ConditionSchemaVerificationRequired is the MysqlDatabase condition of the
// gate: True while status.pendingVerification is set.
const ConditionSchemaVerificationRequired = "SchemaVerificationRequired"

// Reasons of the condition.
const (
	ReasonUnconfirmedDDL = "UnconfirmedDDL"
	ReasonVerified       = "Verified"
)

// GateRecorded tells whether a database's status already accounts for the
// unconfirmed DDL of rec's tenure: some operation is pending verification
// (the gate is closed), or rec's tenure is the one a person last verified.
// Verification covers one tenure (docs/gate.md): a re-run of a verified
// operation id is a new tenure (a new grant), which it does not cover. A
// status written before tenures were recorded (no
// LastVerifiedTenureStart) covers the operation id's record as it stands.
func GateRecorded(st *bloodravenv1alpha1.MysqlDatabaseStatus, rec *leases.Record) bool {
	if st.PendingVerification != nil {
		return true
	}
	if rec == nil || st.LastVerifiedOperationID != rec.OperationID {
		return false
	}
	// At the microsecond the status keeps (MicroTime): the record's time
	// may be finer.
	return st.LastVerifiedTenureStart == nil || st.LastVerifiedTenureStart.Time.Equal(tenureStart(rec).Truncate(time.Microsecond))
}

// VerificationPending is the operation a database waits on, and the
// generation it was granted under; ok is false when the gate is open.
func VerificationPending(st *bloodravenv1alpha1.MysqlDatabaseStatus) (op string, generation int64, ok bool) {
	if p := st.PendingVerification; p != nil {
		return p.OperationID, p.TopologyGeneration, true
	}
	return "", 0, false
}

// CloseGate returns the status with rec's operation pending verification
// and the condition True; changed is false when the status already
// accounts for it (GateRecorded) or rec has no unconfirmed DDL.
func CloseGate(st bloodravenv1alpha1.MysqlDatabaseStatus, rec *leases.Record, observedGeneration int64, now time.Time) (next bloodravenv1alpha1.MysqlDatabaseStatus, changed bool) {
	if !rec.UnconfirmedDDL(now) || GateRecorded(&st, rec) {
		return st, false
	}
	next = *st.DeepCopy()
	p := &bloodravenv1alpha1.SchemaVerification{OperationID: rec.OperationID, TopologyGeneration: rec.Generation,
		TenureStart: microTime(tenureStart(rec)), Ended: string(rec.EndedAs()), Since: metav1.NewTime(now)}
	if rec.State == leases.StateRevoked {
		p.Reason = rec.Reason
	}
	next.PendingVerification = p
	meta.SetStatusCondition(&next.Conditions, metav1.Condition{Type: ConditionSchemaVerificationRequired, Status: metav1.ConditionTrue,
		Reason: ReasonUnconfirmedDDL, ObservedGeneration: observedGeneration, LastTransitionTime: metav1.NewTime(now),
		Message: fmt.Sprintf("migration %s (topologyGeneration %d) ended (%s) after its DDL boundary without confirming its end: "+
			"check the schema, then set the annotation %s=%s", rec.OperationID, rec.Generation, p.Ended, bloodravenv1alpha1.SchemaVerifiedAnnotation, rec.OperationID)})
	return next, true
}

// Verification is what OpenGate decided.
type Verification struct {
	// Status to write when Opened.
	Status bloodravenv1alpha1.MysqlDatabaseStatus
	// Opened: the annotation named the pending operation; the gate opens.
	Opened bool
	// RemoveAnnotation: the annotation names the operation last verified
	// (now or before); it has done its work.
	RemoveAnnotation bool
}

// OpenGate decides on a database's schema-verified annotation (present
// says whether it is set at all). An annotation naming the pending
// operation opens the gate: the operation becomes the last verified, the
// condition False. One naming the last verified operation is removed. Any
// other value is left alone: it names no operation the gate waits on, and
// the condition's message names the one it does.
func OpenGate(st bloodravenv1alpha1.MysqlDatabaseStatus, annotation string, present bool, observedGeneration int64, now time.Time) Verification {
	if !present {
		return Verification{Status: st}
	}
	if p := st.PendingVerification; p != nil && p.OperationID == annotation {
		next := *st.DeepCopy()
		next.PendingVerification = nil
		next.LastVerifiedOperationID = annotation
		next.LastVerifiedTenureStart = p.TenureStart.DeepCopy()
		meta.SetStatusCondition(&next.Conditions, metav1.Condition{Type: ConditionSchemaVerificationRequired, Status: metav1.ConditionFalse,
			Reason: ReasonVerified, ObservedGeneration: observedGeneration, LastTransitionTime: metav1.NewTime(now),
			Message: fmt.Sprintf("migration %s verified by a person", annotation)})
		return Verification{Status: next, Opened: true, RemoveAnnotation: true}
	}
	return Verification{Status: st, RemoveAnnotation: st.PendingVerification == nil && annotation == st.LastVerifiedOperationID}
}
