package leasestore

import (
	"encoding/json"
	"fmt"
	"math"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/leases"
)

// Labels and annotations on deployment Lease objects.
const (
	LabelManagedBy   = "app.kubernetes.io/managed-by"
	ManagedByValue   = "bloodraven"
	LabelDeployLease = "bloodraven.shipstream.io/deployment-lease"
	LabelGroup       = "bloodraven.shipstream.io/group"
	LabelKind        = "bloodraven.shipstream.io/kind"
	RecordAnnotation = "bloodraven.shipstream.io/record"
	// KindPendingTombstone is the kind label of a tombstone whose
	// revocation has not been announced yet. Unlike announced tombstones
	// (kind "tombstone") it is cached and watched, so its creation wakes the
	// group controller, which announces it and relabels it.
	KindPendingTombstone = "tombstone-pending"
)

// kindLabel is the kind label of rec.
func kindLabel(rec *leases.Record) string {
	if rec.Kind == leases.KindTombstone && rec.AnnouncePending {
		return KindPendingTombstone
	}
	return string(rec.Kind)
}

// Encode writes rec into l: labels, the record annotation, the spec
// projection for kubectl users, and the owner reference to group (replaced,
// so a Lease taken over for a re-created group of the same name is owned by
// the new one). group may be nil only for l that already has its owner.
func Encode(l *coordinationv1.Lease, rec *leases.Record, group *bloodravenv1alpha1.MysqlFailoverGroup) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode lease record: %w", err)
	}
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[LabelManagedBy] = ManagedByValue
	l.Labels[LabelDeployLease] = "true"
	l.Labels[LabelGroup] = leases.LabelValue(rec.Group)
	l.Labels[LabelKind] = kindLabel(rec)
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[RecordAnnotation] = string(data)
	if group != nil {
		l.OwnerReferences = []metav1.OwnerReference{GroupOwner(group)}
	}
	l.Spec.HolderIdentity = ptr.To(rec.OperationID)
	l.Spec.LeaseDurationSeconds = ptr.To(durationProjection(rec))
	l.Spec.AcquireTime = &metav1.MicroTime{Time: rec.GrantedAt}
	l.Spec.RenewTime = &metav1.MicroTime{Time: rec.RenewedAt}
	return nil
}

// GroupOwner is the owner reference of an object the operator keeps for
// group (its Leases, its DeployRuns): collected with the group, and never
// blocking its deletion.
func GroupOwner(group *bloodravenv1alpha1.MysqlFailoverGroup) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         bloodravenv1alpha1.GroupVersion.String(),
		Kind:               "MysqlFailoverGroup",
		Name:               group.Name,
		UID:                group.UID,
		BlockOwnerDeletion: ptr.To(false),
	}
}

// OwnerGroup is the group that owns obj (a deployment Lease or a DeployRun)
// by its GroupOwner reference.
func OwnerGroup(obj metav1.Object) (types.NamespacedName, bool) {
	for _, o := range obj.GetOwnerReferences() {
		if o.Kind == "MysqlFailoverGroup" && o.APIVersion == bloodravenv1alpha1.GroupVersion.String() {
			return types.NamespacedName{Namespace: obj.GetNamespace(), Name: o.Name}, true
		}
	}
	return types.NamespacedName{}, false
}

// durationProjection is spec.leaseDurationSeconds: the ttl in whole seconds
// while active, at least 1 (the API server rejects 0), 1 for terminal records.
func durationProjection(rec *leases.Record) int32 {
	if rec.State != leases.StateActive {
		return 1
	}
	return int32(max(1, min(rec.TTLSeconds, math.MaxInt32)))
}

// Decode reads the record of a deployment Lease. A record written before
// records carried their group's UID takes it from the Lease's owner
// reference.
func Decode(l *coordinationv1.Lease) (*leases.Record, error) {
	data, ok := l.Annotations[RecordAnnotation]
	if !ok {
		return nil, fmt.Errorf("lease %s/%s has no %s annotation", l.Namespace, l.Name, RecordAnnotation)
	}
	rec := &leases.Record{}
	if err := json.Unmarshal([]byte(data), rec); err != nil {
		return nil, fmt.Errorf("lease %s/%s: decode record: %w", l.Namespace, l.Name, err)
	}
	if rec.GroupUID == "" {
		for _, o := range l.OwnerReferences {
			if o.Kind == "MysqlFailoverGroup" && o.APIVersion == bloodravenv1alpha1.GroupVersion.String() && o.Name == rec.Group {
				rec.GroupUID = string(o.UID)
			}
		}
	}
	return rec, nil
}
