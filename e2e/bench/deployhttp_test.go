package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/shipstream/bloodraven/deployclient/wire"
	"github.com/shipstream/bloodraven/leases"
)

// deployClient speaks the /deploy/v1 HTTP contract (docs/api.md) and
// nothing else of the operator: one http.Client, keep-alive, the operator's
// CA.
type deployClient struct {
	base string
	hc   *http.Client
	tls  *tls.Config
}

func newDeployClient(baseURL, caFile string) (*deployClient, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", caFile)
	}
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	tr := &http.Transport{
		TLSClientConfig: tc,
		// Every worker keeps its own connection, as separate pipelines
		// would: HTTP/1.1 with keep-alive, enough idle slots for all.
		MaxIdleConns: 512, MaxIdleConnsPerHost: 256, IdleConnTimeout: 5 * time.Minute,
	}
	return &deployClient{base: baseURL + "/deploy/v1/groups/", hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}, tls: tc}, nil
}

// from is a client whose connections come from source address
// 127.0.0.<2+i>: pipelines run in their own Pods, each with its own
// address, and the API's per-source limit on TokenReviews (20 at once,
// then 10/s) is per address. One address for every worker would make a
// cell's fresh tokens queue behind that limit.
func (d *deployClient) from(i int) *deployClient {
	src := &net.TCPAddr{IP: net.IPv4(127, 0, byte((2+i)>>8), byte(2+i))}
	dialer := &net.Dialer{LocalAddr: src, Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{TLSClientConfig: d.tls, DialContext: dialer.DialContext,
		MaxIdleConns: 4, MaxIdleConnsPerHost: 4, IdleConnTimeout: 5 * time.Minute}
	return &deployClient{base: d.base, hc: &http.Client{Transport: tr, Timeout: d.hc.Timeout}, tls: d.tls}
}

// apiAnswer is a response: its status, the contract's error string of an
// error, and the token of a grant (decoded with the wire types).
type apiAnswer struct {
	Status int
	Error  string
	Token  string
}

func (d *deployClient) do(ctx context.Context, method, path, bearer string, body []byte, leaseToken string) (apiAnswer, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.base+path, r)
	if err != nil {
		return apiAnswer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if leaseToken != "" {
		req.Header.Set("X-Lease-Token", leaseToken)
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return apiAnswer{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return apiAnswer{}, err
	}
	a := apiAnswer{Status: resp.StatusCode}
	// Successful renewals are not decoded: the status says it all.
	switch {
	case len(data) == 0 || resp.StatusCode == http.StatusOK:
	case resp.StatusCode < 300:
		var g wire.Grant
		if err := json.Unmarshal(data, &g); err != nil {
			return apiAnswer{}, fmt.Errorf("%s %s: %d, undecodable body %q", method, path, resp.StatusCode, data)
		}
		a.Token = g.Token
	default:
		var e wire.Error
		if err := json.Unmarshal(data, &e); err != nil {
			return apiAnswer{}, fmt.Errorf("%s %s: %d, undecodable body %q", method, path, resp.StatusCode, data)
		}
		a.Error = e.Error
	}
	return a, nil
}

func leasePath(group, operationID string) string {
	return url.PathEscape(group) + "/leases/" + string(leases.KindMigration) + "/" + url.PathEscape(operationID)
}

// grant takes the group's migration lease for operationID and returns the
// lease token.
func (d *deployClient) grant(ctx context.Context, bearer, group, operationID, instance string) (string, error) {
	body, _ := json.Marshal(wire.GrantRequest{Kind: wire.KindMigration, OperationID: operationID,
		Instance: instance, TTLSeconds: 120})
	a, err := d.do(ctx, http.MethodPost, url.PathEscape(group)+"/leases", bearer, body, "")
	if err != nil {
		return "", fmt.Errorf("grant %s/%s: %w", group, operationID, err)
	}
	// Every operation is fresh: 201, never a 200 re-grant.
	if a.Status != http.StatusCreated || a.Token == "" {
		return "", fmt.Errorf("grant %s/%s: %d %s", group, operationID, a.Status, a.Error)
	}
	return a.Token, nil
}

// renewBody is the constant body of a worker's renewals.
func renewBody(leaseToken string) []byte {
	b, _ := json.Marshal(wire.RenewRequest{Token: leaseToken, TTLSeconds: 120})
	return b
}

// renew PUTs one renewal.
func (d *deployClient) renew(ctx context.Context, bearer, group, operationID string, body []byte) (apiAnswer, error) {
	return d.do(ctx, http.MethodPut, leasePath(group, operationID), bearer, body, "")
}

// release ends the lease (204).
func (d *deployClient) release(ctx context.Context, bearer, group, operationID, leaseToken string) error {
	a, err := d.do(ctx, http.MethodDelete, leasePath(group, operationID), bearer, nil, leaseToken)
	if err != nil {
		return fmt.Errorf("release %s/%s: %w", group, operationID, err)
	}
	if a.Status != http.StatusNoContent {
		return fmt.Errorf("release %s/%s: %d %s", group, operationID, a.Status, a.Error)
	}
	return nil
}
