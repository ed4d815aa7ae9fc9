package leases

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Kind of a deployment lease.
type Kind string

// Lease kinds of the deployment API, and the kind of a revocation tombstone.
const (
	KindMigration    Kind = "migration"
	KindFailoverHold Kind = "failover-hold"
	KindTombstone    Kind = "tombstone"
)

// ParseRequestKind returns the lease Kind named s (never KindTombstone).
func ParseRequestKind(s string) (Kind, bool) {
	switch Kind(s) {
	case KindMigration, KindFailoverHold:
		return Kind(s), true
	}
	return "", false
}

// State of a lease record.
type State string

// Lease states. Released, expired and revoked are terminal for the operation
// that held the lease.
const (
	StateActive   State = "active"
	StateReleased State = "released"
	StateExpired  State = "expired"
	StateRevoked  State = "revoked"
)

// Revocation reasons, as the wire spells them.
const (
	ReasonTopologyChanged = "topology_changed"
	ReasonOperatorRevoked = "operator_revoked"
	// ReasonDeferralBudgetExhausted ends a failover-hold (its record only,
	// no tombstone: the operation keeps its migration mutex) when a planned
	// operation's deferral budget is spent (docs/failover.md).
	ReasonDeferralBudgetExhausted = "deferral_budget_exhausted"
)

// RevocationReasons lists every revocation reason, in the order above; the
// operator's metrics and docs/metrics.md are held against it.
var RevocationReasons = []string{ReasonTopologyChanged, ReasonOperatorRevoked, ReasonDeferralBudgetExhausted}

// Record is a deployment lease as stored. Records are values: the
// transitions in transitions.go return a new Record and never edit one in
// place.
type Record struct {
	Group string `json:"group"`
	// GroupUID is the UID of the MysqlFailoverGroup the lease was granted
	// under. A group deleted and re-created under the same name has another
	// UID, so none of the old records counts for it.
	GroupUID    string `json:"groupUID,omitempty"`
	Kind        Kind   `json:"kind"`
	OperationID string `json:"operationId"`
	Instance    string `json:"instance"`
	Identity    string `json:"identity"`
	State       State  `json:"state"`
	Reason      string `json:"reason,omitempty"`
	// Generation is the topologyGeneration the lease was granted under.
	Generation int64     `json:"topologyGeneration"`
	TTLSeconds int64     `json:"ttlSeconds"`
	ExpiresAt  time.Time `json:"expiresAt"`
	GrantedAt  time.Time `json:"grantedAt"`
	RenewedAt  time.Time `json:"renewedAt"`
	// HeldSince, on a migration mutex: when this operation's unbroken
	// tenure of the mutex began (its create or take-over; a re-grant keeps
	// it). A failover-hold granted before it belongs to an earlier tenure
	// and defers nothing (HoldLive). Zero on records written before it
	// existed.
	HeldSince time.Time `json:"heldSince,omitzero"`
	// Phase, on a migration mutex: how far the operation's command got
	// (the DDL boundary), as its renewals reported it. Empty is PhasePreDDL.
	// It only moves forward, and a re-grant keeps it.
	Phase Phase `json:"phase,omitempty"`
	// Outcome, on a migration mutex: what its client reported on release
	// (X-Deploy-Outcome), written with the release, or on the ended record
	// when the client releases after its authority ended. Empty: not
	// reported. The operator copies it into the operation's DeployRun.
	Outcome Outcome `json:"outcome,omitempty"`
	// RevokedAtGeneration, on a revoked record: the topology generation of
	// the group's last move when it was revoked (for topology_changed, the
	// generation the move wrote).
	RevokedAtGeneration int64 `json:"revokedAtGeneration,omitempty"`
	// EndedAt is when a released record was released; zero otherwise.
	EndedAt   time.Time `json:"endedAt,omitzero"`
	TokenHash string    `json:"tokenHash,omitempty"`
	// RevokedTokenHashes, on tombstones only: the hashes of the operation's
	// lease tokens at revocation.
	RevokedTokenHashes []string  `json:"revokedTokenHashes,omitempty"`
	RevokedAt          time.Time `json:"revokedAt,omitzero"`
	// AnnouncePending, on tombstones only: the revocation has not been
	// announced yet (Event DeploymentLeaseRevoked, the revocation counter).
	// Whoever writes a tombstone writes it pending; the group controller
	// announces it and clears the flag with the resourceVersion it read, so
	// each revocation is announced once, whoever wrote it.
	AnnouncePending bool `json:"announcePending,omitempty"`
}

// ExpiryAt is the expiry of a lease granted or renewed at now for ttl
// seconds, at microsecond precision: the precision of Kubernetes MicroTime,
// so status.plannedFailover.admission.retryTime can carry it exactly.
func ExpiryAt(now time.Time, ttlSeconds int64) time.Time {
	return now.Add(time.Duration(ttlSeconds) * time.Second).Truncate(time.Microsecond)
}

// Live tells whether the record itself still has effect at now: active and
// now <= expiresAt. A failover-hold needs more to defer anything: see
// HoldLive.
func (r *Record) Live(now time.Time) bool {
	return r != nil && r.State == StateActive && !now.After(r.ExpiresAt)
}

// TenureStart is when the record's unbroken tenure of the mutex began: its
// HeldSince, or its grant for a record written before HeldSince existed.
// On a tombstone: the start of the tenure it ended (zero when unknown).
func (r *Record) TenureStart() time.Time {
	if r.HeldSince.IsZero() && r.Kind != KindTombstone {
		return r.GrantedAt
	}
	return r.HeldSince
}

// Clone is a copy of r that shares nothing with it.
func (r *Record) Clone() *Record {
	c := *r
	c.RevokedTokenHashes = slices.Clone(r.RevokedTokenHashes)
	return &c
}

// BelongsTo tells whether the record was made for the group with this UID.
// A record of a deleted group of the same name belongs to nobody.
func (r *Record) BelongsTo(groupUID string) bool {
	return r != nil && groupUID != "" && r.GroupUID == groupUID
}

// MigrationName is the name of the group's migration mutex Lease.
func MigrationName(group string) string { return objectName("bloodraven-migration-", group) }

// HoldName is the name of operation's failover-hold Lease.
func HoldName(group, operationID string) string {
	return "bloodraven-hold-" + digest(group+"/"+operationID)
}

// TombstoneName is the name of operation's revocation tombstone.
func TombstoneName(group, operationID string) string {
	return "bloodraven-tombstone-" + digest(group+"/"+operationID)
}

// LeaseName is the Lease holding kind's record of the operation.
func LeaseName(kind Kind, group, operationID string) string {
	switch kind {
	case KindMigration:
		return MigrationName(group)
	case KindTombstone:
		return TombstoneName(group, operationID)
	}
	return HoldName(group, operationID)
}

// LabelValue is name as a label value: the name when it is a valid label
// value, a digest otherwise.
func LabelValue(name string) string {
	if len(validation.IsValidLabelValue(name)) == 0 {
		return name
	}
	return "h-" + digest(name)
}

// MigrationOf is the migration record among recs, or nil.
func MigrationOf(recs []Record) *Record {
	for i := range recs {
		if recs[i].Kind == KindMigration {
			return &recs[i]
		}
	}
	return nil
}

// RevokedToken tells whether token is one of the lease tokens the tombstone
// t revoked.
func (t *Record) RevokedToken(token string) bool {
	for _, h := range t.RevokedTokenHashes {
		if TokenMatches(token, h) {
			return true
		}
	}
	return false
}

func objectName(prefix, group string) string {
	if len(prefix)+len(group) <= validation.DNS1123SubdomainMaxLength {
		return prefix + group
	}
	return prefix + "h-" + digest(group)
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:20])
}
