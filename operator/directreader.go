package operator

import (
	"context"
	"fmt"
	"net/http"

	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsjson "sigs.k8s.io/json"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// directReader is the deployment API's uncached reader. The two reads
// every request makes, the group (the fence) and the database (the
// authorization), are plain GETs from the API server, as through
// controller-runtime's reader, but their JSON is decoded straight into the
// typed object: controller-runtime's decoder first parses the whole
// document once more to find its apiVersion and kind, which the request
// path already knows, and that pass was about a third of the operator's
// cost of decoding a renewal's two reads. Every other read goes to next.
//
// Each kind has its own REST client, over the manager's HTTP client and
// with the manager's client-side limits (as controller-runtime gives each
// kind its own); errors are the API server's (apierrors.IsNotFound holds).
type directReader struct {
	next    client.Reader
	clients map[string]rest.Interface // by resource
}

func newDirectReader(cfg *rest.Config, httpClient *http.Client, next client.Reader) (*directReader, error) {
	r := &directReader{next: next, clients: map[string]rest.Interface{}}
	// The resources zeroed names, all of this project's API group.
	for _, resource := range []string{"mysqlfailovergroups", "mysqldatabases"} {
		c := rest.CopyConfig(cfg)
		gv := bloodravenv1alpha1.GroupVersion
		c.GroupVersion = &gv
		c.APIPath = "/apis"
		c.ContentType = "application/json"
		// Errors come back as metav1.Status, which this codec decodes.
		c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
		rc, err := rest.RESTClientForConfigAndClient(c, httpClient)
		if err != nil {
			return nil, fmt.Errorf("REST client for %s: %w", resource, err)
		}
		r.clients[resource] = rc
	}
	return r, nil
}

// zeroed empties obj (a decode into a used object would keep what the
// document leaves out) and names its resource; "" for other kinds.
func zeroed(obj client.Object) string {
	switch o := obj.(type) {
	case *bloodravenv1alpha1.MysqlFailoverGroup:
		*o = bloodravenv1alpha1.MysqlFailoverGroup{}
		return "mysqlfailovergroups"
	case *bloodravenv1alpha1.MysqlDatabase:
		*o = bloodravenv1alpha1.MysqlDatabase{}
		return "mysqldatabases"
	}
	return ""
}

// Get reads the object named key into obj.
func (r *directReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if len(opts) > 0 {
		return r.next.Get(ctx, key, obj, opts...)
	}
	resource := zeroed(obj)
	if resource == "" {
		return r.next.Get(ctx, key, obj, opts...)
	}
	body, err := r.clients[resource].Get().Namespace(key.Namespace).Resource(resource).Name(key.Name).Do(ctx).Raw()
	if err != nil {
		return err
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(body, obj); err != nil {
		return fmt.Errorf("decode %s %s: %w", resource, key, err)
	}
	return nil
}

// List lists through next.
func (r *directReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return r.next.List(ctx, list, opts...)
}
