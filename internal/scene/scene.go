package scene

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/deployclient/wire"
)

// DeployAudience is the audience of deployment-API tokens.
const DeployAudience = "bloodraven-deploy"

// Group is a MysqlFailoverGroup ns/name with the given sites, or iad and
// pdx without addresses when none are given.
func Group(ns, name string, sites ...bloodravenv1alpha1.Site) *bloodravenv1alpha1.MysqlFailoverGroup {
	if len(sites) == 0 {
		sites = []bloodravenv1alpha1.Site{{Name: "iad"}, {Name: "pdx"}}
	}
	return &bloodravenv1alpha1.MysqlFailoverGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: bloodravenv1alpha1.MysqlFailoverGroupSpec{Sites: sites}}
}

// Database is a MysqlDatabase ns/name of group (schema "counter") that lets
// clients use the deployment API.
func Database(ns, name, group string, clients ...bloodravenv1alpha1.DeploymentClient) *bloodravenv1alpha1.MysqlDatabase {
	return &bloodravenv1alpha1.MysqlDatabase{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: bloodravenv1alpha1.MysqlDatabaseSpec{GroupRef: bloodravenv1alpha1.GroupReference{Name: group}, DatabaseName: "counter", DeploymentClients: clients}}
}

// Token creates the ServiceAccount ns/name unless it exists and returns a
// token for audiences (none: the API server's) from a real TokenRequest.
func Token(ctx context.Context, kube kubernetes.Interface, ns, name string, audiences []string, ttl time.Duration) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("ServiceAccount %s/%s: %w", ns, name, err)
	}
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To(int64(ttl.Seconds()))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("TokenRequest for %s/%s: %w", ns, name, err)
	}
	return tr.Status.Token, nil
}

// ErrNotJSON: an answer that is not the contract's JSON.
var ErrNotJSON = errors.New("not a JSON answer")

// Client sends deployment-API requests with a bearer token.
type Client struct {
	// Base is prefixed to every path ("https://host:port", or "" in-process).
	Base  string
	Token string
	do    func(*http.Request) (*http.Response, error)
}

// ForURL is a client of the listener at base (scheme://host:port).
func ForURL(base string, hc *http.Client, token string) *Client {
	return &Client{Base: base, Token: token, do: hc.Do}
}

// ForHandler is a client that serves each request with h in-process.
func ForHandler(h http.Handler, token string) *Client {
	return &Client{Token: token, do: func(req *http.Request) (*http.Response, error) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Result(), nil
	}}
}

// WithToken is a copy of c that sends token ("" sends no Authorization).
func (c *Client) WithToken(token string) *Client {
	cp := *c
	cp.Token = token
	return &cp
}

// Response is one answer.
type Response struct {
	Status int
	Header http.Header
	Raw    string
	// Body is the decoded JSON object (nil for 204).
	Body map[string]any
}

// Str is a string field of the body ("" if absent).
func (r Response) Str(key string) string { s, _ := r.Body[key].(string); return s }

// Num is a number field of the body (0 if absent).
func (r Response) Num(key string) float64 { n, _ := r.Body[key].(float64); return n }

// Send sends method path with body (nil, a string or []byte sent as is, or
// a value sent as JSON) and headers (name, value pairs). The error is a
// transport error, or ErrNotJSON with the answer still in Response.
func (c *Client) Send(method, path string, body any, headers ...string) (Response, error) {
	var rd io.Reader = http.NoBody
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return Response{}, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, c.Base+path, rd)
	if err != nil {
		return Response{}, err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	given := map[string]bool{} // a header given twice is sent twice
	for i := 0; i+1 < len(headers); i += 2 {
		if given[headers[i]] {
			req.Header.Add(headers[i], headers[i+1])
		} else {
			req.Header.Set(headers[i], headers[i+1])
		}
		given[headers[i]] = true
	}
	resp, err := c.do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Response{}, err
	}
	out := Response{Status: resp.StatusCode, Header: resp.Header, Raw: string(raw)}
	if resp.StatusCode == http.StatusNoContent && len(raw) == 0 {
		return out, nil
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		return out, fmt.Errorf("%w: %s %s: %d with Content-Type %q: %.200s", ErrNotJSON, method, path, resp.StatusCode, ct, raw)
	}
	if err := json.Unmarshal(raw, &out.Body); err != nil || out.Body == nil {
		return out, fmt.Errorf("%w: %s %s: %d: %.200s", ErrNotJSON, method, path, resp.StatusCode, raw)
	}
	if into := wireBody(method, path, resp.StatusCode); into != nil {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(into); err != nil {
			return out, fmt.Errorf("%w: %s %s: %d: %v: %.200s", ErrNotWire, method, path, resp.StatusCode, err, raw)
		}
	}
	return out, nil
}

// ErrNotWire: a /deploy/v1 answer with a member that package wire does not
// define, or of the wrong type.
var ErrNotWire = errors.New("not the wire's body")

// wireBody is the wire type a /deploy/v1 answer decodes into, or nil for a
// path outside it: every error is a wire.Error; a grant's answer is a
// wire.Grant, a renewal's and a lease GET's a wire.Lease, the group GET's a
// wire.Group. Every answer a scene receives is held against them, so that a
// member the server sends and the wire types lack fails the test that saw
// it.
func wireBody(method, path string, status int) any {
	rest, ok := strings.CutPrefix(path, "/deploy/v1/groups/")
	if !ok {
		return nil
	}
	rest, _, _ = strings.Cut(rest, "?")
	parts := strings.Split(rest, "/")
	switch {
	case status >= 400:
		return &wire.Error{}
	case len(parts) == 1 && method == http.MethodGet:
		return &wire.Group{}
	case len(parts) == 2 && parts[1] == "leases" && method == http.MethodPost:
		return &wire.Grant{}
	case len(parts) == 4 && parts[1] == "leases" && (method == http.MethodPut || method == http.MethodGet):
		return &wire.Lease{}
	}
	return nil
}
