package leases

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// Kind of a deployment lease.
type Kind string

// Lease kinds of the deployment API.
const (
	KindMigration    Kind = "migration"
	KindFailoverHold Kind = "failover-hold"
)

// ParseKind returns the Kind named s.
func ParseKind(s string) (Kind, bool) {
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
)

// Labels and annotations on deployment Lease objects.
const (
	LabelManagedBy   = "app.kubernetes.io/managed-by"
	ManagedByValue   = "bloodraven"
	LabelDeployLease = "bloodraven.shipstream.io/deployment-lease"
	LabelGroup       = "bloodraven.shipstream.io/group"
	LabelKind        = "bloodraven.shipstream.io/kind"
	RecordAnnotation = "bloodraven.shipstream.io/record"
	// KindTombstone is the LabelKind value of tombstones.
	KindTombstone = "tombstone"
)

// Record is a deployment lease as stored.
type Record struct {
	Group       string    `json:"group"`
	Kind        Kind      `json:"kind"`
	OperationID string    `json:"operationId"`
	Instance    string    `json:"instance"`
	Identity    string    `json:"identity"`
	State       State     `json:"state"`
	Reason      string    `json:"reason,omitempty"`
	Generation  int64     `json:"topologyGeneration"`
	TTLSeconds  int64     `json:"ttlSeconds"`
	ExpiresAt   time.Time `json:"expiresAt"`
	GrantedAt   time.Time `json:"grantedAt"`
	RenewedAt   time.Time `json:"renewedAt"`
	TokenHash   string    `json:"tokenHash,omitempty"`
	// RevokedTokenHashes, on tombstones only: the hashes of the operation's
	// lease tokens at revocation.
	RevokedTokenHashes []string  `json:"revokedTokenHashes,omitempty"`
	RevokedAt          time.Time `json:"revokedAt,omitzero"`
}

// ExpiryAt is the expiry of a lease granted or renewed at now for ttl
// seconds, at microsecond precision: the precision of Kubernetes MicroTime,
// so status.plannedFailover.admission.retryTime can carry it exactly.
func ExpiryAt(now time.Time, ttlSeconds int64) time.Time {
	return now.Add(time.Duration(ttlSeconds) * time.Second).Truncate(time.Microsecond)
}

// Live tells whether the record still has effect at now: active and
// now <= expiresAt.
func (r *Record) Live(now time.Time) bool {
	return r != nil && r.State == StateActive && !now.After(r.ExpiresAt)
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
	if kind == KindMigration {
		return MigrationName(group)
	}
	return HoldName(group, operationID)
}

// GroupLabelValue is the value of LabelGroup for group: the name when it is a
// valid label value, a digest otherwise.
func GroupLabelValue(group string) string {
	if len(validation.IsValidLabelValue(group)) == 0 {
		return group
	}
	return "h-" + digest(group)
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

// Encode writes rec into l (labels, annotation, spec projection, owner).
func Encode(l *coordinationv1.Lease, rec *Record, group *v1.MysqlFailoverGroup, labelKind string) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode lease record: %w", err)
	}
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[LabelManagedBy] = ManagedByValue
	l.Labels[LabelDeployLease] = "true"
	l.Labels[LabelGroup] = GroupLabelValue(rec.Group)
	l.Labels[LabelKind] = labelKind
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[RecordAnnotation] = string(data)
	if len(l.OwnerReferences) == 0 && group != nil {
		l.OwnerReferences = []metav1.OwnerReference{{
			APIVersion:         v1.GroupVersion.String(),
			Kind:               "MysqlFailoverGroup",
			Name:               group.Name,
			UID:                group.UID,
			BlockOwnerDeletion: ptr.To(false),
		}}
	}
	l.Spec.HolderIdentity = ptr.To(rec.OperationID)
	l.Spec.LeaseDurationSeconds = ptr.To(durationProjection(rec))
	l.Spec.AcquireTime = &metav1.MicroTime{Time: rec.GrantedAt}
	l.Spec.RenewTime = &metav1.MicroTime{Time: rec.RenewedAt}
	return nil
}

// durationProjection is spec.leaseDurationSeconds: the ttl in whole seconds
// while active, at least 1 (the API server rejects 0), 1 for terminal records.
func durationProjection(rec *Record) int32 {
	if rec.State != StateActive {
		return 1
	}
	return int32(max(1, min(rec.TTLSeconds, math.MaxInt32)))
}

// Decode reads the record of a deployment Lease.
func Decode(l *coordinationv1.Lease) (*Record, error) {
	data, ok := l.Annotations[RecordAnnotation]
	if !ok {
		return nil, fmt.Errorf("lease %s/%s has no %s annotation", l.Namespace, l.Name, RecordAnnotation)
	}
	rec := &Record{}
	if err := json.Unmarshal([]byte(data), rec); err != nil {
		return nil, fmt.Errorf("lease %s/%s: decode record: %w", l.Namespace, l.Name, err)
	}
	return rec, nil
}
