package deployapi

import (
	"context"
	"fmt"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// changes wakes the lease GETs held on a group when the operator's
// informers see that group, or one of the deployment Leases it owns, added,
// changed or deleted. A held GET looks at the caches only when woken, when
// a time it knows of passes (its lease's expiry) or when a confirmation is
// due (watch): between changes, any number of held GETs read nothing.
//
// It holds one channel per group that a held GET waits on, closed (and
// forgotten) at the group's next change; a group no GET waits on costs
// nothing.
type changes struct {
	mu    sync.Mutex
	woken map[types.NamespacedName]chan struct{}
}

func newChanges() *changes {
	return &changes{woken: map[types.NamespacedName]chan struct{}{}}
}

// next is closed at the first change of group after the call. Take it
// before looking at the caches: a change while looking then wakes the
// next wait.
func (c *changes) next(group types.NamespacedName) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.woken[group]
	if !ok {
		ch = make(chan struct{})
		c.woken[group] = ch
	}
	return ch
}

// changed wakes whoever waits on group.
func (c *changes) changed(group types.NamespacedName) {
	c.mu.Lock()
	ch, ok := c.woken[group]
	delete(c.woken, group)
	c.mu.Unlock()
	if ok {
		close(ch)
	}
}

// notify is an informer's event: the group it concerns, if any, changed.
func (c *changes) notify(obj any) {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if g, ok := groupOf(obj); ok {
		c.changed(g)
	}
}

// groupOf is the group an informer's object concerns: a group itself, or
// the group that owns a deployment Lease.
func groupOf(obj any) (types.NamespacedName, bool) {
	switch o := obj.(type) {
	case *bloodravenv1alpha1.MysqlFailoverGroup:
		return client.ObjectKeyFromObject(o), true
	case *coordinationv1.Lease:
		return leasestore.OwnerGroup(o)
	}
	return types.NamespacedName{}, false
}

// register hands c the events of informers' groups and Leases. It does not
// wait for the informers to sync (they start with their cache); it adds a
// handler for the life of the process.
func (c *changes) register(informers cache.Informers) error {
	h := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    c.notify,
		UpdateFunc: func(_, obj any) { c.notify(obj) },
		DeleteFunc: c.notify,
	}
	for _, obj := range []client.Object{&bloodravenv1alpha1.MysqlFailoverGroup{}, &coordinationv1.Lease{}} {
		inf, err := informers.GetInformer(context.Background(), obj, cache.BlockUntilSynced(false))
		if err != nil {
			return fmt.Errorf("deployapi: informer of %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(h); err != nil {
			return fmt.Errorf("deployapi: watch %T: %w", obj, err)
		}
	}
	return nil
}
