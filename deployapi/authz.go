package deployapi

import (
	"context"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// GroupRefField is the MysqlDatabase field the API finds a group's
// databases by: a selectable field on the API server and, registered with
// IndexDatabases, an index of the informer cache.
const GroupRefField = "spec.groupRef.name"

// IndexDatabases registers the cache index the API's authorization
// proposes candidates from (Config.Databases). Call it before the cache
// starts.
func IndexDatabases(ctx context.Context, indexer client.FieldIndexer) error {
	err := indexer.IndexField(ctx, &v1.MysqlDatabase{}, GroupRefField, func(o client.Object) []string {
		return []string{o.(*v1.MysqlDatabase).Spec.GroupRef.Name}
	})
	if err != nil {
		return fmt.Errorf("index MysqlDatabases by %s: %w", GroupRefField, err)
	}
	return nil
}

// authorize resolves the group the caller may use: the caller must be in
// deploymentClients of a MysqlDatabase whose groupRef is group (with
// instance set, of the database of that name), all such databases must live
// in one namespace, and the group must exist there. Anything else is
// errForbidden, whatever the reason, so a 403 never tells whether the group
// exists.
//
// The decision is made on uncached reads; the cache only proposes. The
// candidates are the cached databases of the group that list the caller
// (an index lookup: its cost does not grow with the databases or groups of
// the cluster). Each candidate is then read by name from the API server,
// and only that read can authorize: a client removed from a database is
// refused by the very next request, whatever the cache still holds. A
// database, or a client, the cache has not seen yet is not proposed: a
// brief false 403, never a false 200. In one namespace the first confirmed
// candidate settles it, so a steady request costs one GET, made at the same
// time as the group's; a second namespace is read only when the cache
// proposes one, and if it confirms, the answer is the ambiguity 403. The
// group returned is a fresh read: it carries the fence.
func (s *Server) authorize(ctx context.Context, id Identity, group, instance string) (*v1.MysqlFailoverGroup, error) {
	byNS, err := s.candidates(ctx, id, group, instance)
	if err != nil {
		return nil, err
	}
	namespaces := make([]string, 0, len(byNS))
	for ns := range byNS {
		namespaces = append(namespaces, ns)
	}
	sort.Strings(namespaces)
	switch len(namespaces) {
	case 0:
		return nil, errForbidden
	case 1:
		// The usual case. The group is read while the database is
		// confirmed (both reads start after the request did, so the fence
		// is as fresh as read one after the other); the group is used only
		// if the database confirms.
		ns := namespaces[0]
		type read struct {
			g   *v1.MysqlFailoverGroup
			err error
		}
		groupRead := make(chan read, 1)
		go func() {
			g, err := s.readGroup(ctx, ns, group)
			groupRead <- read{g, err}
		}()
		ok, err := s.confirm(ctx, id, group, ns, byNS[ns])
		gr := <-groupRead
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, errForbidden
		}
		return gr.g, gr.err
	}
	namespace := ""
	for _, ns := range namespaces {
		ok, err := s.confirm(ctx, id, group, ns, byNS[ns])
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if namespace != "" {
			return nil, errForbidden // ambiguous across namespaces
		}
		namespace = ns
	}
	if namespace == "" {
		return nil, errForbidden
	}
	return s.readGroup(ctx, namespace, group)
}

// readGroup reads the group from the API server; errForbidden when absent.
func (s *Server) readGroup(ctx context.Context, namespace, name string) (*v1.MysqlFailoverGroup, error) {
	g := &v1.MysqlFailoverGroup{}
	if err := s.api.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, g); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errForbidden
		}
		return nil, fmt.Errorf("get MysqlFailoverGroup %s/%s: %w", namespace, name, err)
	}
	return g, nil
}

// candidates are the names, by namespace, of the cached databases of group
// that list the caller (with instance set, only databases of that name).
func (s *Server) candidates(ctx context.Context, id Identity, group, instance string) (map[string][]string, error) {
	var dbs v1.MysqlDatabaseList
	if err := s.dbs.List(ctx, &dbs, client.MatchingFields{GroupRefField: group}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list cached MysqlDatabases of group %q: %w", group, err)
	}
	out := map[string][]string{}
	for i := range dbs.Items {
		db := &dbs.Items[i]
		if admits(db, id, group, instance) {
			out[db.Namespace] = append(out[db.Namespace], db.Name)
		}
	}
	return out, nil
}

// confirm reads the candidates of one namespace from the API server, in
// order, until one admits the caller.
func (s *Server) confirm(ctx context.Context, id Identity, group, namespace string, names []string) (bool, error) {
	sort.Strings(names)
	for _, name := range names {
		db := &v1.MysqlDatabase{}
		if err := s.api.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, db); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return false, fmt.Errorf("get MysqlDatabase %s/%s: %w", namespace, name, err)
		}
		if admits(db, id, group, db.Name) {
			return true, nil
		}
	}
	return false, nil
}

// admits reports whether db authorizes the caller for group (and, when
// instance is set, is that instance).
func admits(db *v1.MysqlDatabase, id Identity, group, instance string) bool {
	if db.Spec.GroupRef.Name != group || (instance != "" && db.Name != instance) {
		return false
	}
	for _, c := range db.Spec.DeploymentClients {
		if c.Namespace == id.Namespace && c.ServiceAccount == id.ServiceAccount {
			return true
		}
	}
	return false
}
