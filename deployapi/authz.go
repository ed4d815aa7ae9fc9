package deployapi

import (
	"context"
	"errors"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/deployapi/authn"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// GroupRefField is the MysqlDatabase field the API finds a group's
// databases by: a selectable field on the API server and, registered with
// IndexDatabases, an index of the informer cache.
const GroupRefField = "spec.groupRef.name"

// IndexDatabases registers the cache index the API's authorization
// proposes candidates from (Config.Databases). Call it before the cache
// starts.
func IndexDatabases(ctx context.Context, indexer client.FieldIndexer) error {
	err := indexer.IndexField(ctx, &bloodravenv1alpha1.MysqlDatabase{}, GroupRefField, func(o client.Object) []string {
		return []string{o.(*bloodravenv1alpha1.MysqlDatabase).Spec.GroupRef.Name}
	})
	if err != nil {
		return fmt.Errorf("index MysqlDatabases by %s: %w", GroupRefField, err)
	}
	return nil
}

// scope is what authorization settles a request against: the namespace
// it may use and, when the request names or settles an instance, the one
// database that must list the caller.
type scope struct {
	namespace string
	instance  string
}

// authorize resolves the group the caller may use (docs/api.md, "Resolved
// (tenants)"). Anything it refuses is errForbidden, whatever the reason, so
// a 403 never tells whether the group exists.
//
// Which namespace a request means:
//   - with ?namespace=, only that namespace is considered;
//   - a lease route (the lease GET, PUT, DELETE) is settled by the lease
//     itself: the namespace whose record of that operation carries the
//     caller's lease token, authorized against the record's own instance
//     (that database must still list the caller), not any database of the
//     group;
//   - otherwise a namespace counts only where the caller is in
//     deploymentClients of a database of the group (of the request's
//     instance, for a grant) AND a MysqlFailoverGroup named {group} exists.
//     A database naming a group its namespace does not have authorizes
//     nothing and makes nothing ambiguous; two namespaces that count are the
//     ambiguity 403.
//
// The decision is made on uncached reads; the caches only propose. The
// candidates are the cached databases of the group that list the caller
// (an index lookup: its cost does not grow with the databases or groups of
// the cluster), in namespaces whose group the group cache holds. Each
// candidate is then read by name from the API server, and only that read
// can authorize: a client removed from a database is refused by the very
// next request, whatever the cache still holds. A database, a group or a
// client the caches have not seen yet is not proposed: a brief false 403,
// never a false 200. A steady request costs one database GET, made at the
// same time as the group's; the group returned is a fresh read: it carries
// the fence. The observation (GET of the group) is the exception: it grants
// nothing and lists its leases from the cache, so its group comes from the
// group cache too, and the database GET is its only read. These reads wait
// for the caller's own read slots (fair share, fairshare.go), so a flood of
// one identity queues on its own budget.
func (s *Server) authorize(ctx context.Context, id authn.Identity, c *call) (*bloodravenv1alpha1.MysqlFailoverGroup, error) {
	api := c.ticket.reader(s.api)
	groups := api
	if c.route == "get_group" {
		// The observation grants nothing and lists the leases from the
		// cache: its group comes from the same cache. Only the database
		// read authorizes, and it stays uncached.
		groups = s.groupCache()
	}
	byNS, err := s.candidates(ctx, id, c.group, c.instance, c.namespace)
	if err != nil {
		return nil, err
	}
	if c.leaseRoute() {
		sc, settled, err := s.settleByLease(ctx, c, byNS)
		if err != nil {
			return nil, err
		}
		if settled {
			return s.confirmScope(ctx, api, groups, id, c.group, sc, nil)
		}
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
		// The usual case: the database and the group are read at once.
		ns := namespaces[0]
		return s.confirmScope(ctx, api, groups, id, c.group, scope{namespace: ns, instance: c.instance}, byNS[ns])
	}
	var found *bloodravenv1alpha1.MysqlFailoverGroup
	for _, ns := range namespaces {
		g, err := s.confirmScope(ctx, api, groups, id, c.group, scope{namespace: ns, instance: c.instance}, byNS[ns])
		if errors.Is(err, errForbidden) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if found != nil {
			return nil, errForbidden // ambiguous across namespaces
		}
		found = g
	}
	if found == nil {
		return nil, errForbidden
	}
	return found, nil
}

// confirmScope reads the group of sc's namespace and, at the same time, the
// databases that may authorize the caller there: sc.instance when set,
// otherwise names (the cache's candidates), in order, until one admits the
// caller. Both reads start after the request did, so the fence is as fresh
// as read one after the other; the group is used only if a database
// confirms. errForbidden when no database confirms or the group is absent.
func (s *Server) confirmScope(ctx context.Context, api, groups client.Reader, id authn.Identity, group string, sc scope, names []string) (*bloodravenv1alpha1.MysqlFailoverGroup, error) {
	if sc.instance != "" {
		names = []string{sc.instance}
	}
	type read struct {
		g   *bloodravenv1alpha1.MysqlFailoverGroup
		err error
	}
	groupRead := make(chan read, 1)
	go func() {
		g, err := s.readGroup(ctx, groups, sc.namespace, group)
		groupRead <- read{g, err}
	}()
	ok, err := s.confirm(ctx, api, id, group, sc.namespace, names)
	gr := <-groupRead
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errForbidden
	}
	return gr.g, gr.err
}

// settleByLease finds the namespace whose record of the call's operation
// carries the caller's lease token, among the candidate namespaces: first
// on the lease cache, then (when the cache shows no match: it may lag a
// grant) on fresh reads. settled is false when no record matches; the
// request is then settled by the namespace rule, and its action answers
// what the lease's state calls for (403 token_mismatch, 404, 409).
func (s *Server) settleByLease(ctx context.Context, c *call, byNS map[string][]string) (sc scope, settled bool, err error) {
	if c.token == "" || len(byNS) == 0 {
		return scope{}, false, nil
	}
	namespaces := make([]string, 0, len(byNS))
	for ns := range byNS {
		namespaces = append(namespaces, ns)
	}
	sort.Strings(namespaces)
	name := leases.LeaseName(c.kind, c.group, c.operationID)
	for _, fresh := range []bool{false, true} {
		var matches []scope
		for _, ns := range namespaces {
			o, err := s.leases.Get(ctx, ns, name, fresh)
			if err != nil {
				if errors.Is(err, leasestore.ErrCorrupt) {
					continue // a record that cannot be read settles nothing
				}
				return scope{}, false, err
			}
			rec := leasestore.RecordOf(o)
			if rec == nil || rec.OperationID != c.operationID || rec.Kind != c.kind || !leases.TokenMatches(c.token, rec.TokenHash) {
				continue
			}
			matches = append(matches, scope{namespace: ns, instance: rec.Instance})
		}
		switch len(matches) {
		case 0:
			continue
		case 1:
			return matches[0], true, nil
		default:
			return scope{}, false, errForbidden // one token in two namespaces: settle nothing
		}
	}
	return scope{}, false, nil
}

// readGroup reads the group from the API server through api; errForbidden
// when absent.
func (s *Server) readGroup(ctx context.Context, api client.Reader, namespace, name string) (*bloodravenv1alpha1.MysqlFailoverGroup, error) {
	g := &bloodravenv1alpha1.MysqlFailoverGroup{}
	if err := api.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, g); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, errForbidden
		}
		return nil, fmt.Errorf("get MysqlFailoverGroup %s/%s: %w", namespace, name, err)
	}
	return g, nil
}

// candidates are the names, by namespace, of the cached databases of group
// that list the caller (with instance set, only databases of that name;
// with namespace set, only that namespace), in namespaces where the group
// cache holds a group of that name.
func (s *Server) candidates(ctx context.Context, id authn.Identity, group, instance, namespace string) (map[string][]string, error) {
	var dbs bloodravenv1alpha1.MysqlDatabaseList
	if err := s.dbs.List(ctx, &dbs, client.MatchingFields{GroupRefField: group}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list cached MysqlDatabases of group %q: %w", group, err)
	}
	out := map[string][]string{}
	hasGroup := map[string]bool{}
	for i := range dbs.Items {
		db := &dbs.Items[i]
		if (namespace != "" && db.Namespace != namespace) || !admits(db, id, group, instance) {
			continue
		}
		has, seen := hasGroup[db.Namespace]
		if !seen {
			var err error
			if has, err = s.groupProposed(ctx, db.Namespace, group); err != nil {
				return nil, err
			}
			hasGroup[db.Namespace] = has
		}
		if has {
			out[db.Namespace] = append(out[db.Namespace], db.Name)
		}
	}
	return out, nil
}

// groupProposed reports whether the group cache holds group in namespace.
// It proposes only: the uncached read of the group decides.
func (s *Server) groupProposed(ctx context.Context, namespace, group string) (bool, error) {
	// Only existence matters: the cache's object is not copied.
	if err := s.groupCache().Get(ctx, client.ObjectKey{Namespace: namespace, Name: group}, &bloodravenv1alpha1.MysqlFailoverGroup{}, client.UnsafeDisableDeepCopy); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("cached MysqlFailoverGroup %s/%s: %w", namespace, group, err)
	}
	return true, nil
}

// confirm reads the candidates of one namespace from the API server, in
// order, until one admits the caller.
func (s *Server) confirm(ctx context.Context, api client.Reader, id authn.Identity, group, namespace string, names []string) (bool, error) {
	sort.Strings(names)
	for _, name := range names {
		db := &bloodravenv1alpha1.MysqlDatabase{}
		if err := api.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, db); err != nil {
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
func admits(db *bloodravenv1alpha1.MysqlDatabase, id authn.Identity, group, instance string) bool {
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
