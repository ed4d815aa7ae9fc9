package operator

import (
	"fmt"
	"net/http"
	"strings"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// MapperProvider is the manager's REST mapper: controller-runtime's dynamic
// mapper, with the mappings of the kinds on the deployment API's request
// path remembered once found (fixedScopeKinds). A namespaced cache asks
// the mapper whether a kind is namespaced on every read, and the dynamic
// mapper answers through a chain of mappers that allocates on each call:
// about a tenth of a renewal's cost in the operator, for an answer that
// never changes while the process runs.
func MapperProvider(cfg *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
	m, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("REST mapper: %w", err)
	}
	return &fixedScopeMapper{RESTMapper: m}, nil
}

// fixedScopeKinds are the kinds whose mapping cannot change under a running
// operator: the Lease is built in, and this project's kinds are defined by
// the CRDs it installs (their scope is fixed by the API: a CRD's scope
// cannot be changed).
var fixedScopeKinds = map[schema.GroupKind]bool{
	coordinationv1.SchemeGroupVersion.WithKind("Lease").GroupKind():            true,
	bloodravenv1alpha1.GroupVersion.WithKind("MysqlFailoverGroup").GroupKind(): true,
	bloodravenv1alpha1.GroupVersion.WithKind("MysqlDatabase").GroupKind():      true,
	bloodravenv1alpha1.GroupVersion.WithKind("DeployRun").GroupKind():          true,
}

// fixedScopeMapper remembers the RESTMapping of the fixedScopeKinds after
// the first successful answer; every other question (and every failed one)
// goes to the mapper it wraps.
type fixedScopeMapper struct {
	meta.RESTMapper
	found sync.Map // mappingKey -> meta.RESTMapping
}

type mappingKey struct {
	gk       schema.GroupKind
	versions string
}

func (m *fixedScopeMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if !fixedScopeKinds[gk] {
		return m.RESTMapper.RESTMapping(gk, versions...)
	}
	k := mappingKey{gk: gk, versions: strings.Join(versions, ",")}
	if v, ok := m.found.Load(k); ok {
		mapping := v.(meta.RESTMapping)
		return &mapping, nil
	}
	mapping, err := m.RESTMapper.RESTMapping(gk, versions...)
	if err != nil {
		return nil, err
	}
	m.found.Store(k, *mapping)
	return mapping, nil
}
