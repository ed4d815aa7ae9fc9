package deployapi

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/shipstream/bloodraven/deployclient/wire"
	"github.com/shipstream/bloodraven/internal/testenv"
)

// openAPI is the part of docs/openapi.yaml the tests read.
type openAPI struct {
	OpenAPI string                                `json:"openapi"`
	Paths   map[string]map[string]any             `json:"paths"`
	Comps   struct{ Schemas map[string]oaSchema } `json:"components"`
}

type oaSchema struct {
	Type       any                 `json:"type"`
	Required   []string            `json:"required"`
	Properties map[string]oaSchema `json:"properties"`
	Ref        string              `json:"$ref"`
	Items      *oaSchema           `json:"items"`
	Enum       []string            `json:"enum"`
}

func readOpenAPI(t *testing.T) openAPI {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPI
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("docs/openapi.yaml is OpenAPI %q, want 3.1.0", doc.OpenAPI)
	}
	return doc
}

// httprouterParam turns :name into {name}.
var httprouterParam = regexp.MustCompile(`:([A-Za-z]+)`)

// The document has exactly the server's routes: an added route or a
// removed one fails here.
func TestOpenAPIDocumentHasTheServersRoutes(t *testing.T) {
	doc := readOpenAPI(t)
	var want, got []string
	for _, rt := range (&Server{}).routes() {
		want = append(want, rt.method+" "+httprouterParam.ReplaceAllString(rt.path, "{$1}"))
	}
	for path, item := range doc.Paths {
		for method := range item {
			if method != "parameters" {
				got = append(got, strings.ToUpper(method)+" "+path)
			}
		}
	}
	sort.Strings(want)
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Fatalf("docs/openapi.yaml routes\n  %v\nthe server's\n  %v", got, want)
	}
}

// Every body schema has exactly the members of its wire type, each with
// the JSON type of its Go field, and requires those the server always
// sends (no omitempty).
func TestOpenAPISchemasAreTheWireTypes(t *testing.T) {
	doc := readOpenAPI(t)
	bodies := map[string]any{
		"GrantRequest": wire.GrantRequest{}, "RenewRequest": wire.RenewRequest{}, "Lease": wire.Lease{}, "Grant": wire.Grant{},
		"Group": wire.Group{}, "Health": wire.Health{}, "Operations": wire.Operations{}, "Planned": wire.Planned{},
		"ListedLease": wire.ListedLease{}, "Admission": wire.Admission{}, "CutOver": wire.CutOver{}, "Error": wire.Error{}, "Holder": wire.Holder{},
	}
	if len(doc.Comps.Schemas) != len(bodies) {
		t.Errorf("docs/openapi.yaml has %d schemas, the wire %d bodies", len(doc.Comps.Schemas), len(bodies))
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			sch, ok := doc.Comps.Schemas[name]
			if !ok {
				t.Fatalf("no schema %s", name)
			}
			fields := wireFields(reflect.TypeOf(body))
			var got []string
			for p := range sch.Properties {
				got = append(got, p)
			}
			want := wire.Members(body)
			sort.Strings(got)
			sort.Strings(want)
			if !slices.Equal(got, want) {
				t.Fatalf("properties %v, wire members %v", got, want)
			}
			for _, m := range want {
				f := fields[m]
				if jt := jsonType(f.Type); !schemaAllows(doc, sch.Properties[m], jt) {
					t.Errorf("%s: schema type %v, Go %s is %s", m, sch.Properties[m].Type, f.Type, jt)
				}
				// Requests: the server requires what has no default.
				// Answers: always present unless omitempty.
				omit := strings.Contains(f.Tag.Get("json"), "omitempty")
				if name == "GrantRequest" || name == "RenewRequest" {
					omit = omit || m == "phase"
				}
				if req := slices.Contains(sch.Required, m); req == omit {
					t.Errorf("%s: required=%v, but omitempty=%v", m, req, omit)
				}
			}
		})
	}
}

// The error enum is every code docs/api.md's error table names.
func TestOpenAPIErrorCodesAreTheContracts(t *testing.T) {
	doc := readOpenAPI(t)
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| (\\d{3}) \\| `([a-z_]+)` \\|")
	var table []string
	statuses := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		table = append(table, m[2])
		statuses[m[1]] = true
	}
	enum := slices.Clone(doc.Comps.Schemas["Error"].Properties["error"].Enum)
	sort.Strings(table)
	sort.Strings(enum)
	if len(table) < 15 || !slices.Equal(enum, table) {
		t.Fatalf("Error.error enum %v, docs/api.md's error table %v", enum, table)
	}
	// Every status of the table is answered by some route of the document.
	answered := map[string]bool{}
	for _, item := range doc.Paths {
		for method, op := range item {
			if method == "parameters" {
				continue
			}
			resp, _ := op.(map[string]any)["responses"].(map[string]any)
			for st := range resp {
				answered[st] = true
			}
		}
	}
	for st := range statuses {
		if !answered[st] {
			t.Errorf("docs/api.md's status %s is answered by no route of docs/openapi.yaml", st)
		}
	}
}

func wireFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			for k, v := range wireFields(f.Type) {
				out[k] = v
			}
			continue
		}
		out[name] = f
	}
	return out
}

func jsonType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice:
		return "array"
	case reflect.Struct, reflect.Pointer:
		return "object"
	}
	return fmt.Sprintf("unknown %s", t.Kind())
}

func schemaAllows(doc openAPI, s oaSchema, jt string) bool {
	if s.Ref != "" {
		return jt == "object" && doc.Comps.Schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")].Type == "object"
	}
	switch typ := s.Type.(type) {
	case string:
		return typ == jt
	case []any:
		return slices.Contains(typ, any(jt))
	}
	return false
}
