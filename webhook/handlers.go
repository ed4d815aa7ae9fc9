package webhook

import (
	"context"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// Paths of the webhooks on the TLS listener; the markers below must match.
const (
	GroupPath          = "/validate-bloodraven-shipstream-io-v1alpha1-mysqlfailovergroup"
	GroupStatusPath    = "/validate-bloodraven-shipstream-io-v1alpha1-mysqlfailovergroup-status"
	DatabasePath       = "/validate-bloodraven-shipstream-io-v1alpha1-mysqldatabase"
	DeployRunPath      = "/validate-bloodraven-shipstream-io-v1alpha1-deployrun"
	DatabaseStatusPath = "/validate-bloodraven-shipstream-io-v1alpha1-mysqldatabase-status"
)

// +kubebuilder:webhook:path=/validate-bloodraven-shipstream-io-v1alpha1-mysqlfailovergroup,mutating=false,failurePolicy=fail,sideEffects=None,groups=bloodraven.shipstream.io,resources=mysqlfailovergroups,verbs=create;update,versions=v1alpha1,name=spec.mysqlfailovergroups.bloodraven.shipstream.io,admissionReviewVersions=v1,timeoutSeconds=5
// +kubebuilder:webhook:path=/validate-bloodraven-shipstream-io-v1alpha1-mysqlfailovergroup-status,mutating=false,failurePolicy=fail,sideEffects=None,groups=bloodraven.shipstream.io,resources=mysqlfailovergroups/status,verbs=update,versions=v1alpha1,name=status.mysqlfailovergroups.bloodraven.shipstream.io,admissionReviewVersions=v1,timeoutSeconds=5
// +kubebuilder:webhook:path=/validate-bloodraven-shipstream-io-v1alpha1-mysqldatabase,mutating=false,failurePolicy=fail,sideEffects=None,groups=bloodraven.shipstream.io,resources=mysqldatabases,verbs=create;update,versions=v1alpha1,name=mysqldatabases.bloodraven.shipstream.io,admissionReviewVersions=v1,timeoutSeconds=5
// +kubebuilder:webhook:path=/validate-bloodraven-shipstream-io-v1alpha1-mysqldatabase-status,mutating=false,failurePolicy=fail,sideEffects=None,groups=bloodraven.shipstream.io,resources=mysqldatabases/status,verbs=update,versions=v1alpha1,name=status.mysqldatabases.bloodraven.shipstream.io,admissionReviewVersions=v1,timeoutSeconds=5
// +kubebuilder:webhook:path=/validate-bloodraven-shipstream-io-v1alpha1-deployrun,mutating=false,failurePolicy=fail,sideEffects=None,groups=bloodraven.shipstream.io,resources=deployruns;deployruns/status,verbs=create;update;delete,versions=v1alpha1,name=deployruns.bloodraven.shipstream.io,admissionReviewVersions=v1,timeoutSeconds=5

// Register mounts the webhooks on srv. operatorIdentity is the user name the
// operator authenticates as (system:serviceaccount:<ns>:<name>).
func Register(srv webhook.Server, scheme *runtime.Scheme, operatorIdentity string) {
	dec := admission.NewDecoder(scheme)
	srv.Register(GroupPath, &webhook.Admission{Handler: &groupSpecHandler{dec: dec}})
	srv.Register(GroupStatusPath, &webhook.Admission{Handler: &statusGuard[*bloodravenv1alpha1.MysqlFailoverGroup]{dec: dec, operator: operatorIdentity,
		kind: groupKind, newObj: func() *bloodravenv1alpha1.MysqlFailoverGroup { return &bloodravenv1alpha1.MysqlFailoverGroup{} }, check: ValidateStatusChange}})
	srv.Register(DatabasePath, &webhook.Admission{Handler: &databaseHandler{dec: dec}})
	// The database's conditions and schema-verification gate: a person
	// opens the gate with the schema-verified annotation.
	srv.Register(DatabaseStatusPath, &webhook.Admission{Handler: &statusGuard[*bloodravenv1alpha1.MysqlDatabase]{dec: dec, operator: operatorIdentity,
		kind: databaseKind, newObj: func() *bloodravenv1alpha1.MysqlDatabase { return &bloodravenv1alpha1.MysqlDatabase{} }, check: ValidateDatabaseStatusChange}})
	srv.Register(DeployRunPath, &webhook.Admission{Handler: &deployRunHandler{operator: operatorIdentity}})
}

var (
	groupKind    = schema.GroupKind{Group: bloodravenv1alpha1.GroupVersion.Group, Kind: "MysqlFailoverGroup"}
	databaseKind = schema.GroupKind{Group: bloodravenv1alpha1.GroupVersion.Group, Kind: "MysqlDatabase"}
	runKind      = schema.GroupKind{Group: bloodravenv1alpha1.GroupVersion.Group, Kind: "DeployRun"}
)

// deny turns field errors into the API server's Invalid status, so kubectl
// prints each field and what to do.
func deny(gk schema.GroupKind, name string, errs field.ErrorList) admission.Response {
	status := apierrors.NewInvalid(gk, name, errs).ErrStatus
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &status}}
}

func verdict(gk schema.GroupKind, name string, errs field.ErrorList) admission.Response {
	if len(errs) > 0 {
		return deny(gk, name, errs)
	}
	return admission.Allowed("")
}

type groupSpecHandler struct{ dec admission.Decoder }

func (h *groupSpecHandler) Handle(_ context.Context, req admission.Request) admission.Response {
	g := &bloodravenv1alpha1.MysqlFailoverGroup{}
	if err := h.dec.Decode(req, g); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	return verdict(groupKind, g.Name, ValidateGroupSpec(g))
}

// statusGuard guards the status subresource of T: the status is the
// operator's alone. check decides on the old and new objects, told whether
// the operator made the change (the group's guard also holds the operator
// to the fence's rules).
type statusGuard[T client.Object] struct {
	dec      admission.Decoder
	operator string
	kind     schema.GroupKind
	newObj   func() T
	check    func(oldObj, newObj T, isOperator bool) field.ErrorList
}

func (h *statusGuard[T]) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	newObj, oldObj := h.newObj(), h.newObj()
	if err := h.dec.DecodeRaw(req.Object, newObj); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if err := h.dec.DecodeRaw(req.OldObject, oldObj); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	isOperator := h.operator != "" && req.UserInfo.Username == h.operator
	return verdict(h.kind, newObj.GetName(), h.check(oldObj, newObj, isOperator))
}

type databaseHandler struct{ dec admission.Decoder }

func (h *databaseHandler) Handle(_ context.Context, req admission.Request) admission.Response {
	db := &bloodravenv1alpha1.MysqlDatabase{}
	if err := h.dec.Decode(req, db); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	return verdict(databaseKind, db.Name, ValidateDatabase(db))
}

// deployRunHandler guards DeployRuns, spec and status: they are history the
// operator writes, so only the operator may create, change or delete one;
// the garbage collector and the namespace controller may delete them
// (ValidateRunWriter).
type deployRunHandler struct{ operator string }

func (h *deployRunHandler) Handle(_ context.Context, req admission.Request) admission.Response {
	return verdict(runKind, req.Name, ValidateRunWriter(string(req.Operation), req.SubResource, req.UserInfo.Username, h.operator))
}
