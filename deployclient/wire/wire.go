package wire

import (
	"reflect"
	"strings"
	"time"
)

// Error codes: the "error" member of every error body (docs/api.md,
// "Errors"). Pipelines branch on these strings.
const (
	CodeBadRequest       = "bad_request"
	CodeUnauthenticated  = "unauthenticated"
	CodeForbidden        = "forbidden"
	CodeMigrationNotHeld = "migration_not_held"
	CodeTokenMismatch    = "token_mismatch"
	CodeNotFound         = "not_found"
	CodeHeld             = "held"
	CodeRevoked          = "revoked"
	// CodeVerificationRequired refuses a migration grant for an instance
	// whose last run lost authority past its DDL boundary.
	CodeVerificationRequired = "verification_required"
	// CodeDeferralBudgetExhausted refuses a failover-hold grant while a
	// planned operation's deferral budget is spent.
	CodeDeferralBudgetExhausted = "deferral_budget_exhausted"
	CodeTooLarge                = "too_large"
	CodeUnstable                = "unstable"
	CodeMethodNotAllowed        = "method_not_allowed"
	CodeNotLeader               = "not_leader"
	CodeRateLimited             = "rate_limited"
	// CodeUnavailable and CodeInternal are outside the contract's table:
	// the Kubernetes API server failed or throttled the operator, or the
	// operator failed.
	CodeUnavailable = "unavailable"
	CodeInternal    = "internal"
)

// Lease kinds, as the wire spells them.
const (
	KindMigration    = "migration"
	KindFailoverHold = "failover-hold"
)

// Phase is how far a migration's command got, as a renewal reports it and
// the migration lease records it: pre-ddl, ddl or done. Phases only move
// forward.
type Phase string

// Phases of a migration, in order. The empty Phase is none.
const (
	PhasePreDDL Phase = "pre-ddl"
	PhaseDDL    Phase = "ddl"
	PhaseDone   Phase = "done"
)

// Before reports whether p comes before q in the order pre-ddl, ddl, done;
// the empty Phase comes with pre-ddl.
func (p Phase) Before(q Phase) bool { return p.rank() < q.rank() }

func (p Phase) rank() int {
	switch p {
	case PhaseDDL:
		return 1
	case PhaseDone:
		return 2
	}
	return 0
}

// GrantRequest is the body of POST /deploy/v1/groups/{group}/leases.
// TTLSeconds 0 is not sent: the server's default applies.
type GrantRequest struct {
	Kind        string `json:"kind"`
	OperationID string `json:"operationId"`
	Instance    string `json:"instance"`
	TTLSeconds  int64  `json:"ttlSeconds,omitempty"`
}

// RenewRequest is the body of PUT .../leases/{kind}/{operationId}.
// TTLSeconds 0 keeps the lease's ttl; Phase, on the migration lease only,
// is sent when not empty.
type RenewRequest struct {
	Token      string `json:"token"`
	TTLSeconds int64  `json:"ttlSeconds,omitempty"`
	Phase      Phase  `json:"phase,omitempty"`
}

// Lease answers a renewal and a lease GET.
type Lease struct {
	Kind               string `json:"kind"`
	OperationID        string `json:"operationId"`
	Instance           string `json:"instance"`
	ExpiresAt          string `json:"expiresAt"`
	TopologyGeneration int64  `json:"topologyGeneration"`
	TTLSeconds         int64  `json:"ttlSeconds"`
	// Namespace is the group's namespace, the one the request was settled
	// in: a client pins it.
	Namespace string `json:"namespace"`
	// Phase, on the migration lease only: the phase the record holds.
	Phase Phase `json:"phase,omitempty"`
}

// Grant answers a grant (201) or a re-grant of the same operation (200):
// the lease and its token. The token is shown once.
type Grant struct {
	Lease
	Token string `json:"token"`
}

// Group is what GET /deploy/v1/groups/{group} answers: an observation, which
// grants nothing.
type Group struct {
	Group              string        `json:"group"`
	Namespace          string        `json:"namespace"`
	ActiveSite         string        `json:"activeSite"`
	TopologyGeneration int64         `json:"topologyGeneration"`
	Health             Health        `json:"health"`
	Operations         Operations    `json:"operations"`
	Stable             bool          `json:"stable"`
	UnstableReason     string        `json:"unstableReason"`
	Leases             []ListedLease `json:"leases"`
	// Admission is present only while a deferral budget runs.
	Admission *Admission `json:"admission,omitempty"`
	// CutOver is the group's side of an online schema change's cut-over:
	// whether it is allowed now and, when not, why. The operator always
	// sends it; nil means an operator older than cut-overs.
	CutOver *CutOver `json:"cutOver,omitempty"`
}

// CutOver says whether the group allows an online schema change to cut
// over now (docs/online-schema-change.md). Reason is empty when Allowed,
// else PlannedOperationDue, PlannedOperationPending or GroupUnstable;
// MarginSeconds is the margin "due" was judged by. A run also needs its
// grant generation to be the group's and its confirmed lease deadline to
// leave its own margin: `bloodraven-deploy cut-over` checks both.
type CutOver struct {
	Allowed       bool   `json:"allowed"`
	Reason        string `json:"reason"`
	Message       string `json:"message"`
	MarginSeconds int64  `json:"marginSeconds"`
}

// The group's reasons to refuse a cut-over (CutOver.Reason), in the order
// the operator checks them (docs/online-schema-change.md).
const (
	CutOverPlannedOperationDue     = "PlannedOperationDue"
	CutOverPlannedOperationPending = "PlannedOperationPending"
	CutOverGroupUnstable           = "GroupUnstable"
)

// DefaultCutOverMargin is how long a tool's cut-over may take unless the
// run says otherwise (`cut-over --budget`, `run --cut-over-budget`), and
// the margin the observation judges "due" by.
const DefaultCutOverMargin = 10 * time.Second

// Health is the group's health block.
type Health struct {
	Ready                 bool    `json:"ready"`
	DegradedReason        string  `json:"degradedReason"`
	ReplicationRunning    bool    `json:"replicationRunning"`
	ReplicationLagSeconds float64 `json:"replicationLagSeconds"`
	RecoveryPending       bool    `json:"recoveryPending"`
}

// Operations are the phases of the group's operations.
type Operations struct {
	PlannedFailover  Planned `json:"plannedFailover"`
	UpdatePhase      string  `json:"updatePhase"`
	RestoreInPlace   string  `json:"restoreInPlace"`
	DragonflyUpgrade string  `json:"dragonflyUpgrade"`
}

// Planned is a planned failover's phase and reason.
type Planned struct {
	Phase  string `json:"phase"`
	Reason string `json:"reason"`
}

// ListedLease is a live lease as the group GET lists it.
type ListedLease struct {
	Kind               string `json:"kind"`
	OperationID        string `json:"operationId"`
	Instance           string `json:"instance"`
	ExpiresAt          string `json:"expiresAt"`
	TopologyGeneration int64  `json:"topologyGeneration"`
}

// Admission is a running deferral budget: when the planned operation it
// bounds proceeds whatever the holds say; the earliest when several run.
type Admission struct {
	Operation        string `json:"operation"`
	ID               string `json:"id"`
	BudgetExhaustsAt string `json:"budgetExhaustsAt"`
}

// Error is every error body. Error is the code; the other members are
// present only with the codes that carry them (docs/api.md): message with
// bad_request, holder with held, reason and topologyGeneration with revoked,
// operationId and topologyGeneration with verification_required,
// retryAfterSeconds with unstable, rate_limited and
// deferral_budget_exhausted.
type Error struct {
	Error              string  `json:"error"`
	Message            string  `json:"message,omitempty"`
	Holder             *Holder `json:"holder,omitempty"`
	Reason             string  `json:"reason,omitempty"`
	OperationID        string  `json:"operationId,omitempty"`
	TopologyGeneration int64   `json:"topologyGeneration,omitempty"`
	RetryAfterSeconds  int64   `json:"retryAfterSeconds,omitempty"`
}

// Holder is the operation that holds a group's migration mutex.
type Holder struct {
	OperationID string `json:"operationId"`
	Instance    string `json:"instance"`
	ExpiresAt   string `json:"expiresAt"`
}

// Members lists the JSON member names of a body type, embedded structs
// flattened, in declaration order: what a strict decoder accepts and what
// the OpenAPI document and docs/api.md are held against.
func Members(body any) []string {
	return members(reflect.TypeOf(body))
}

func members(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
		case f.Anonymous && name == "":
			out = append(out, members(f.Type)...)
		case f.IsExported():
			if name == "" {
				name = f.Name
			}
			out = append(out, name)
		}
	}
	return out
}
