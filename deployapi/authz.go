package deployapi

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// groupRefField is the MysqlDatabase selectable field that names its group.
const groupRefField = "spec.groupRef.name"

// authorize resolves the group the caller may use. It lists the
// MysqlDatabases that reference group (uncached, one request, filtered by the
// API server on the selectable field) and keeps those that list the caller in
// deploymentClients; with instance set, only the database of that name. The
// candidates must all live in one namespace, and the group must exist there;
// otherwise errForbidden, whatever the reason, so a 403 never tells whether
// the group exists. The group returned is a fresh read: it carries the fence.
func (s *Server) authorize(ctx context.Context, id Identity, group, instance string) (*v1.MysqlFailoverGroup, error) {
	var dbs v1.MysqlDatabaseList
	if err := s.api.List(ctx, &dbs, client.MatchingFields{groupRefField: group}); err != nil {
		return nil, fmt.Errorf("list MysqlDatabases of group %q: %w", group, err)
	}
	namespace := ""
	for i := range dbs.Items {
		db := &dbs.Items[i]
		if db.Spec.GroupRef.Name != group || (instance != "" && db.Name != instance) || !listsClient(db, id) {
			continue
		}
		if namespace != "" && namespace != db.Namespace {
			return nil, errForbidden // ambiguous across namespaces
		}
		namespace = db.Namespace
	}
	if namespace == "" {
		return nil, errForbidden
	}
	g := &v1.MysqlFailoverGroup{}
	if err := s.api.Get(ctx, client.ObjectKey{Namespace: namespace, Name: group}, g); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errForbidden
		}
		return nil, fmt.Errorf("get MysqlFailoverGroup %s/%s: %w", namespace, group, err)
	}
	return g, nil
}

func listsClient(db *v1.MysqlDatabase, id Identity) bool {
	for _, c := range db.Spec.DeploymentClients {
		if c.Namespace == id.Namespace && c.ServiceAccount == id.ServiceAccount {
			return true
		}
	}
	return false
}
