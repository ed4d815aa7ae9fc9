// Package scheme builds the runtime.Scheme shared by the operator, the tests
// and the playground: client-go's built-in types plus
// bloodraven.shipstream.io/v1alpha1. It guarantees nothing else.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// New returns a scheme with client-go's types and the project's types.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(bloodravenv1alpha1.AddToScheme(s))
	return s
}
