package webhook

import (
	"fmt"
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// whatToDoInstead names the two ways a person may change what status
// records: the revoke annotation and a planned failover.
const whatToDoInstead = "to end every deployment lease, annotate the group with " + bloodravenv1alpha1.RevokeDeploymentLeasesAnnotation +
	"; to move the primary, request spec.plannedFailover"

// FenceAdvice is what a denied fence edit tells the user to do instead.
const FenceAdvice = "editing status.topologyGeneration or status.activeSite by hand is lying to the fence: " + whatToDoInstead

// StatusAdvice is what a denied edit of any other status field tells the
// user to do instead.
const StatusAdvice = "only the operator may change a group's status: it acts on its own status " +
	"(a transition, a reservation, a phase), so a hand-written field is an instruction nobody authorized; " +
	whatToDoInstead + " (a new id is a new request)"

var (
	statusPath = field.NewPath("status")
	genPath    = statusPath.Child("topologyGeneration")
	sitePath   = statusPath.Child("activeSite")
)

// ValidateStatusChange checks an update of a group's status. isOperator tells
// whether the request comes from the operator's own identity. An update that
// changes nothing is allowed for everyone; anyone but the operator may change
// nothing. The operator's writes are not checked here: they skip the webhook
// (NotTheOperator), and the fence guard (FenceGuard), which the API server
// evaluates without calling anyone, holds its fence moves to the rules.
func ValidateStatusChange(oldG, newG *bloodravenv1alpha1.MysqlFailoverGroup, isOperator bool) field.ErrorList {
	oldS, newS := &oldG.Status, &newG.Status
	if isOperator || equality.Semantic.DeepEqual(oldS, newS) {
		return nil
	}
	return append(validateFenceUntouched(oldS, newS), validateRestUntouched(oldS, newS)...)
}

// validateFenceUntouched refuses a change of the fence by anyone but the
// operator.
func validateFenceUntouched(oldS, newS *bloodravenv1alpha1.MysqlFailoverGroupStatus) field.ErrorList {
	switch {
	case newS.TopologyGeneration != oldS.TopologyGeneration:
		return field.ErrorList{field.Forbidden(genPath, "only the operator may change the topology generation; "+FenceAdvice)}
	case newS.ActiveSite != oldS.ActiveSite:
		return field.ErrorList{field.Forbidden(sitePath, "only the operator may change the active site; "+FenceAdvice)}
	}
	return nil
}

// validateRestUntouched refuses a change of any status field other than the
// fence by anyone but the operator, naming each changed field. A change no
// named field accounts for is refused on status itself.
func validateRestUntouched(oldS, newS *bloodravenv1alpha1.MysqlFailoverGroupStatus) field.ErrorList {
	if equality.Semantic.DeepEqual(oldS, newS) {
		return nil
	}
	changed := changedStatusFields(oldS, newS)
	if len(changed) == 0 {
		return field.ErrorList{field.Forbidden(statusPath, StatusAdvice)}
	}
	var errs field.ErrorList
	for _, name := range changed {
		p := statusPath.Child(name)
		if p.String() == genPath.String() || p.String() == sitePath.String() {
			continue // the fence: validateFenceUntouched says what to do
		}
		errs = append(errs, field.Forbidden(p, StatusAdvice))
	}
	return errs
}

type statusField struct {
	index int    // in MysqlFailoverGroupStatus
	name  string // in JSON
}

// statusFields are read from the type, so that a field added later is
// compared too.
var statusFields = func() []statusField {
	var out []statusField
	t := reflect.TypeOf(bloodravenv1alpha1.MysqlFailoverGroupStatus{})
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || f.Anonymous || name == "" || name == "-" {
			continue // not a named JSON field; the whole-status comparison covers it
		}
		out = append(out, statusField{index: i, name: name})
	}
	return out
}()

// changedStatusFields names, by JSON name, the top-level status fields whose
// values differ semantically.
func changedStatusFields(oldS, newS *bloodravenv1alpha1.MysqlFailoverGroupStatus) []string {
	o, n := reflect.ValueOf(oldS).Elem(), reflect.ValueOf(newS).Elem()
	var changed []string
	for _, f := range statusFields {
		if !equality.Semantic.DeepEqual(o.Field(f.index).Interface(), n.Field(f.index).Interface()) {
			changed = append(changed, f.name)
		}
	}
	return changed
}

func hasSite(g *bloodravenv1alpha1.MysqlFailoverGroup, name string) bool {
	for _, s := range g.Spec.Sites {
		if s.Name == name {
			return true
		}
	}
	return false
}

// ValidateGroupSpec checks what the CRD schema cannot: targets name declared
// sites, names are unique, the active site stays declared.
func ValidateGroupSpec(g *bloodravenv1alpha1.MysqlFailoverGroup) field.ErrorList {
	var errs field.ErrorList
	sites := field.NewPath("spec", "sites")
	seen := map[string]int{}
	for i, s := range g.Spec.Sites {
		p := sites.Index(i).Child("name")
		if msgs := validation.IsDNS1123Label(s.Name); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p, s.Name, fmt.Sprintf("site names are DNS labels: %v", msgs)))
		}
		if j, dup := seen[s.Name]; dup {
			errs = append(errs, field.Duplicate(p, fmt.Sprintf("%s (also spec.sites[%d])", s.Name, j)))
		}
		seen[s.Name] = i
	}
	if pf := g.Spec.PlannedFailover; pf != nil && !hasSite(g, pf.TargetSite) {
		errs = append(errs, field.NotFound(field.NewPath("spec", "plannedFailover", "targetSite"), pf.TargetSite))
	}
	if r := g.Spec.RestoreInPlace; r != nil && r.TargetSite != "" && !hasSite(g, r.TargetSite) {
		errs = append(errs, field.NotFound(field.NewPath("spec", "restoreInPlace", "targetSite"), r.TargetSite))
	}
	if a := g.Status.ActiveSite; a != "" && !hasSite(g, a) {
		errs = append(errs, field.Forbidden(sites, fmt.Sprintf("site %q is the active site (status.activeSite) and cannot be removed; fail over first", a)))
	}
	return errs
}

// ValidateDatabase checks a MysqlDatabase's group reference and client list.
func ValidateDatabase(db *bloodravenv1alpha1.MysqlDatabase) field.ErrorList {
	var errs field.ErrorList
	ref := field.NewPath("spec", "groupRef", "name")
	switch {
	case db.Spec.GroupRef.Name == "":
		errs = append(errs, field.Required(ref, "name the MysqlFailoverGroup of this database, in the same namespace"))
	default:
		if msgs := validation.IsDNS1123Subdomain(db.Spec.GroupRef.Name); len(msgs) > 0 {
			errs = append(errs, field.Invalid(ref, db.Spec.GroupRef.Name, fmt.Sprintf("not a valid object name: %v", msgs)))
		}
	}
	clients := field.NewPath("spec", "deploymentClients")
	seen := map[string]int{}
	for i, c := range db.Spec.DeploymentClients {
		p := clients.Index(i)
		if c.Namespace == "" {
			errs = append(errs, field.Required(p.Child("namespace"), "the namespace of the deploy pipeline's ServiceAccount"))
		} else if msgs := validation.IsDNS1123Label(c.Namespace); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p.Child("namespace"), c.Namespace, fmt.Sprintf("not a valid namespace name: %v", msgs)))
		}
		if c.ServiceAccount == "" {
			errs = append(errs, field.Required(p.Child("serviceAccount"), "the name of the deploy pipeline's ServiceAccount"))
		} else if msgs := validation.IsDNS1123Subdomain(c.ServiceAccount); len(msgs) > 0 {
			errs = append(errs, field.Invalid(p.Child("serviceAccount"), c.ServiceAccount, fmt.Sprintf("not a valid ServiceAccount name: %v", msgs)))
		}
		if c.Namespace == "" {
			continue
		}
		if j, dup := seen[c.Namespace]; dup {
			errs = append(errs, field.Duplicate(p.Child("namespace"),
				fmt.Sprintf("%s: spec.deploymentClients[%d] already names a ServiceAccount in this namespace; one per namespace", c.Namespace, j)))
		}
		seen[c.Namespace] = i
	}
	return errs
}

// RunAdvice is what a refused DeployRun write tells the user.
const RunAdvice = "DeployRuns record what ran and are written by the operator only; " +
	"they follow the group's migration leases, and the operator keeps spec.deployRunHistory of them per instance " +
	"(lower it on the MysqlFailoverGroup to keep fewer)"

// collectors may delete DeployRuns besides the operator: the garbage
// collector (the owning group was deleted) and the namespace controller (the
// namespace was), as service accounts or as kube-controller-manager itself.
// They may also update one's metadata: the garbage collector rewrites owner
// references when a group is deleted with --cascade=orphan.
var collectors = map[string]bool{
	"system:serviceaccount:kube-system:generic-garbage-collector": true,
	"system:serviceaccount:kube-system:namespace-controller":      true,
	"system:kube-controller-manager":                              true,
}

// ValidateRunWriter checks a write of a DeployRun by user (operation is the
// admission operation, CREATE, UPDATE or DELETE; subresource is "status" for
// a status write): only operator may create one or write its status; only
// operator and the collectors may change its metadata or delete it.
func ValidateRunWriter(operation, subresource, user, operator string) field.ErrorList {
	if operator != "" && user == operator {
		return nil
	}
	if collectors[user] && (operation == "DELETE" || (operation == "UPDATE" && subresource == "")) {
		return nil
	}
	verb := map[string]string{"CREATE": "create", "UPDATE": "change", "DELETE": "delete"}[operation]
	if verb == "" {
		verb = strings.ToLower(operation)
	}
	return field.ErrorList{field.Forbidden(field.NewPath("metadata"),
		fmt.Sprintf("%s may not %s a DeployRun: %s", user, verb, RunAdvice))}
}

// DatabaseStatusAdvice is what a refused edit of a database's status tells
// the user to do instead.
const DatabaseStatusAdvice = "only the operator may change a database's status: to open the schema-verification gate once the schema is checked, " +
	"annotate the MysqlDatabase " + bloodravenv1alpha1.SchemaVerifiedAnnotation + "=<operationId> (or run kubectl bloodraven verify DATABASE OPERATION)"

// ValidateDatabaseStatusChange checks an update of a database's status:
// anyone but the operator may change nothing (an edit that changes nothing
// is allowed for everyone). Clearing status.pendingVerification by hand
// would open the gate without the record and the Event the annotation
// leaves.
func ValidateDatabaseStatusChange(oldDB, newDB *bloodravenv1alpha1.MysqlDatabase, isOperator bool) field.ErrorList {
	if isOperator || equality.Semantic.DeepEqual(&oldDB.Status, &newDB.Status) {
		return nil
	}
	return field.ErrorList{field.Forbidden(statusPath, DatabaseStatusAdvice)}
}
