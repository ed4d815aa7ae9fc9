package deployapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/shipstream/bloodraven/deployclient/wire"
	"github.com/shipstream/bloodraven/leases"
)

// maxBodyBytes is the request body limit (16 KiB).
const maxBodyBytes = 16 << 10

// operationIDPattern: 1-128 characters, letters, digits, '.', '_', ':' and
// '-', starting with a letter or digit. UUIDs fit.
var operationIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

func validateOperationID(id string) *apiError {
	if !operationIDPattern.MatchString(id) {
		return errBadRequest("operationId must be 1-128 characters of letters, digits, '.', '_', ':' or '-', starting with a letter or digit")
	}
	return nil
}

func validateInstance(name string) *apiError {
	if name == "" {
		return errBadRequest("instance is required: the MysqlDatabase resource name")
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return errBadRequest("instance must be a MysqlDatabase resource name: " + strings.Join(errs, "; "))
	}
	return nil
}

func parseKind(s string) (leases.Kind, *apiError) {
	k, ok := leases.ParseRequestKind(s)
	if !ok {
		return "", errBadRequest(fmt.Sprintf("unknown kind %q: want migration or failover-hold", s))
	}
	return k, nil
}

// ttlField is ttlSeconds as sent: absent/null, or a JSON number that must be
// an integer. Any integer, however large, is accepted and clamped later.
type ttlField struct {
	set   bool
	value int64
}

func (t *ttlField) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*t = ttlField{}
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil || len(b) == 0 || b[0] == '"' {
		return errors.New("ttlSeconds must be an integer")
	}
	s := n.String()
	if strings.ContainsAny(s, ".eE") {
		return errors.New("ttlSeconds must be an integer")
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
			// An integer out of int64's range: clamp by sign.
			v = leases.MaxTTLSeconds
			if strings.HasPrefix(s, "-") {
				v = leases.MinTTLSeconds
			}
		} else {
			return errors.New("ttlSeconds must be an integer")
		}
	}
	*t = ttlField{set: true, value: v}
	return nil
}

func (t ttlField) ptr() *int64 {
	if !t.set {
		return nil
	}
	v := t.value
	return &v
}

// grantRequest is the body of POST .../leases (wire.GrantRequest), with
// ttlSeconds decoded as sent: absent or null apart from 0, any integer
// accepted. The outer field shadows the embedded one of the same name.
type grantRequest struct {
	wire.GrantRequest
	TTLSeconds ttlField `json:"ttlSeconds"`
}

// renewRequest is the body of PUT .../leases/{kind}/{operationId}
// (wire.RenewRequest), with ttlSeconds as in grantRequest and phase
// (optional, migration only: pre-ddl, ddl or done) telling an empty string
// from an absent member.
type renewRequest struct {
	wire.RenewRequest
	TTLSeconds ttlField `json:"ttlSeconds"`
	Phase      *string  `json:"phase"`
}

// Member names a request may carry: the wire types'.
var (
	grantMembers = wire.Members(wire.GrantRequest{})
	renewMembers = wire.Members(wire.RenewRequest{})
)

// readBody reads at most maxBodyBytes; more is 413.
func readBody(r *http.Request) ([]byte, *apiError) {
	if r.ContentLength > maxBodyBytes {
		return nil, errTooLarge
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return nil, errBadRequest("cannot read the request body")
	}
	if len(b) > maxBodyBytes {
		return nil, errTooLarge
	}
	return b, nil
}

// decodeStrict decodes exactly one JSON object whose member names are all
// in fields, exactly (encoding/json alone matches names case-insensitively
// and lets a repeated member's last value win; the contract makes both a
// 400).
func decodeStrict(b []byte, into any, fields ...string) *apiError {
	if len(bytes.TrimSpace(b)) == 0 {
		return errBadRequest("a JSON object body is required")
	}
	if e := checkMembers(b, fields); e != nil {
		return e
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return errBadRequest("malformed JSON body: " + jsonErrorText(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return errBadRequest("malformed JSON body: data after the object")
	}
	return nil
}

// checkMembers walks the top-level object of b: every member name must be
// one of fields, spelled exactly, and appear once.
func checkMembers(b []byte, fields []string) *apiError {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return errBadRequest("malformed JSON body: want a JSON object")
	}
	seen := make(map[string]bool, len(fields))
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return errBadRequest("malformed JSON body: " + jsonErrorText(err))
		}
		name, _ := t.(string)
		if !slices.Contains(fields, name) {
			return errBadRequest(fmt.Sprintf("unknown field %q (field names are case-sensitive)", clip(name)))
		}
		if seen[name] {
			return errBadRequest(fmt.Sprintf("field %q is repeated", name))
		}
		seen[name] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return errBadRequest("malformed JSON body: " + jsonErrorText(err))
		}
	}
	return nil // the closing brace and what follows are checked by the decode
}

// clip bounds caller text quoted back in a message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// jsonErrorText keeps decoder messages short and free of Go type names.
func jsonErrorText(err error) string {
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) {
		return fmt.Sprintf("field %s has the wrong type", ute.Field)
	}
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "json: ")
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return msg
}

// decodeGrant parses and validates a grant body.
func decodeGrant(b []byte) (grantRequest, leases.Kind, *apiError) {
	var req grantRequest
	if e := decodeStrict(b, &req, grantMembers...); e != nil {
		return req, "", e
	}
	kind, e := parseKind(req.Kind)
	if e != nil {
		return req, "", e
	}
	if e := validateOperationID(req.OperationID); e != nil {
		return req, "", e
	}
	if e := validateInstance(req.Instance); e != nil {
		return req, "", e
	}
	return req, kind, nil
}

// decodeRenew parses a renewal body. An empty token is not a shape error:
// it is answered token_mismatch by the lease decision.
func decodeRenew(b []byte, kind leases.Kind) (renewRequest, leases.Phase, *apiError) {
	var req renewRequest
	if e := decodeStrict(b, &req, renewMembers...); e != nil {
		return req, "", e
	}
	if len(req.Token) > 1024 {
		return req, "", errBadRequest("token is too long")
	}
	if req.Phase == nil {
		return req, "", nil
	}
	if kind != leases.KindMigration {
		return req, "", errBadRequest("phase is for the migration lease only")
	}
	p, ok := leases.ParsePhase(*req.Phase)
	if !ok {
		return req, "", errBadRequest(`phase must be "pre-ddl", "ddl" or "done"`)
	}
	return req, p, nil
}
