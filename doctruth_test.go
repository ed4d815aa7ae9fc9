package bloodraven_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"

	"sigs.k8s.io/yaml"
)

// The docs name only what exists: a doc that names a package, file,
// function, flag, chart value or link target that is not there is a bug
// (a rename left it behind). What the docs name of other projects is
// listed in external, each with why.

// external are names in the docs that belong to other projects.
var external = map[string]string{
	"cmd/controller":                "cert-manager's module (docs/node.md)",
	"cmd/webhook":                   "cert-manager's module (docs/node.md)",
	"cmd/cainjector":                "cert-manager's module (docs/node.md)",
	"--field-selector":              "kubectl",
	"--manifest":                    "krew",
	"deployclient/vX.Y.Z":           "the client module's git tag (docs/release.md)",
	"--as":                          "kubectl's ConfigFlags (k8s.io/cli-runtime), which kubectl-bloodraven binds",
	"--as-group":                    "kubectl's ConfigFlags (k8s.io/cli-runtime), which kubectl-bloodraven binds",
	"--request-timeout":             "kubectl's ConfigFlags (k8s.io/cli-runtime), which kubectl-bloodraven binds",
	"--force-conflicts":             "kubectl",
	"--server-side":                 "kubectl",
	"--reuse-values":                "helm",
	"--reset-then-reuse-values":     "helm",
	"--run-firewall":                "kube-router",
	"--run-router":                  "kube-router",
	"--run-service-proxy":           "kube-router",
	"--trust-namespace":             "trust-manager",
	"--help":                        "every command's built-in help (Go's flag package and cobra)",
	"--subresource":                 "kubectl",
	"auxiliary.deployApi.enabled":   "the misspelt key the chart's README shows the schema refusing",
	"--log-development":             "a flag 0.2.0 removed, named by docs/upgrading.md and the changelog",
	"--plugin":                      "pt-online-schema-change (docs/online-schema-change.md)",
	"--postpone-cut-over-flag-file": "gh-ost (docs/online-schema-change.md)",
	"--hooks-path":                  "gh-ost (docs/online-schema-change.md)",
	"--show-managed-fields":         "kubectl get (docs/leases.md)",
}

// docFiles are the Markdown pages of the project.
func docFiles(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("git", "ls-files", "*.md").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	return strings.Fields(string(out))
}

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// declToken is pkg.Name in a code span: a package of this module and a
// declaration in it (a method's type is checked, not the method).
var declToken = regexp.MustCompile(`(?:^|[\s(])([a-z][a-z0-9]*)\.([A-Za-z_][A-Za-z0-9_]*)\b(?:[^./\w-]|\.[A-Z]|$)`)

var (
	listOnce sync.Once
	listed   map[string][]string
	listErr  error
)

// packageDirs maps each package name of the module (main packages left
// out) to its directories, from one go list per test binary.
func packageDirs(t *testing.T) map[string][]string {
	t.Helper()
	listOnce.Do(func() { listed, listErr = listPackages() })
	if listErr != nil {
		t.Fatalf("go list: %v", listErr)
	}
	return listed
}

func listPackages() (map[string][]string, error) {
	out, err := exec.Command("go", "list", "-f", "{{.Name}} {{.Dir}}", "./...").Output()
	if err != nil {
		return nil, err
	}
	dirs := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, dir, _ := strings.Cut(line, " ")
		if name != "main" {
			dirs[name] = append(dirs[name], dir)
		}
	}
	return dirs, nil
}

var (
	codeSpan  = regexp.MustCompile("`([^`\n]+)`")
	pathToken = regexp.MustCompile(`(?:^|[\s(])([a-z][\w.-]*/[\w./-]*[\w/])`)
	goFile    = regexp.MustCompile(`^[\w-]+\.go$`)
	flagToken = regexp.MustCompile(`(?:^|[\s\[(=])(--[a-z][a-z0-9-]+)`)
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading   = regexp.MustCompile(`(?m)^#{1,6} +(.+)$`)
)

// topLevel is the set of names a path in a doc that means this repository
// starts with: the root's directories, and the last element of every Go
// package's directory (so that a path under a package that moved, written
// with its old parent, is caught: the path must exist as written).
func topLevel(t *testing.T) map[string]bool {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && e.Name() != "bin" {
			out[e.Name()] = true
		}
	}
	root, _ := os.Getwd()
	for _, dirs := range packageDirs(t) {
		for _, d := range dirs {
			if base := filepath.Base(d); base != "v1alpha1" && d != root {
				out[base] = true
			}
		}
	}
	return out
}

var (
	declMu sync.Mutex
	decls  = map[string]map[string]bool{} // directory -> its top-level names
)

// declared reports whether the package in dir declares name at top level
// (a function, method, type, constant or variable), tests included. Each
// directory is parsed once.
func declared(dir, name string) bool {
	declMu.Lock()
	defer declMu.Unlock()
	names, ok := decls[dir]
	if !ok {
		names = topLevelNames(dir)
		decls[dir] = names
	}
	return names[name]
}

func topLevelNames(dir string) map[string]bool {
	names := map[string]bool{}
	fset := token.NewFileSet()
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			continue
		}
		for _, d := range file.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				names[d.Name.Name] = true
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						names[s.Name.Name] = true
					case *ast.ValueSpec:
						for _, n := range s.Names {
							names[n.Name] = true
						}
					}
				}
			}
		}
	}
	return names
}

// pathExists resolves a path a doc names: a file or directory from the root
// or from the doc's directory, or pkg.Name for a declaration of a package.
func pathExists(doc, p string) bool {
	p = strings.TrimSuffix(strings.TrimSuffix(p, "/..."), "/")
	for _, base := range []string{".", filepath.Dir(doc)} {
		if _, err := os.Stat(filepath.Join(base, p)); err == nil {
			return true
		}
	}
	dir, name := filepath.Split(p)
	if pkg, ident, ok := strings.Cut(name, "."); ok && ident != "" && !strings.Contains(ident, ".") {
		return declared(filepath.Join(dir, pkg), strings.TrimSuffix(ident, "()"))
	}
	return false
}

func TestTheDocsNameOnlyWhatExists(t *testing.T) {
	tops := topLevel(t)
	tracked, err := exec.Command("git", "ls-files", "*.go").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	goFiles := map[string]bool{}
	var literals strings.Builder
	for _, f := range strings.Fields(string(tracked)) {
		goFiles[filepath.Base(f)] = true
		if !strings.HasSuffix(f, "_test.go") {
			literals.WriteString(readDoc(t, f))
		}
	}
	src := literals.String()
	values := chartValues(t)
	pkgDirs := packageDirs(t)
	for _, doc := range docFiles(t) {
		if doc == "CHANGELOG.md" {
			continue // history names what was
		}
		text := readDoc(t, doc)
		for _, span := range codeSpan.FindAllStringSubmatch(text, -1) {
			code := span[1]
			for _, m := range pathToken.FindAllStringSubmatch(code, -1) {
				p := m[1]
				first, _, _ := strings.Cut(p, "/")
				if !tops[first] || external[p] != "" || strings.ContainsAny(p, "{}*<>") {
					continue
				}
				if !pathExists(doc, p) {
					t.Errorf("%s names %s, which does not exist", doc, p)
				}
			}
			for _, m := range declToken.FindAllStringSubmatch(code, -1) {
				dirs, ok := pkgDirs[m[1]]
				if _, chart := values[m[1]]; !ok || chart || m[1] == "bloodraven" {
					continue // a chart value's path; bloodraven.*: the fence's SQL schema
				}
				if !slices.ContainsFunc(dirs, func(d string) bool { return declared(d, m[2]) }) {
					t.Errorf("%s names %s.%s, which package %s does not declare", doc, m[1], m[2], m[1])
				}
			}
			if goFile.MatchString(code) && !goFiles[code] {
				t.Errorf("%s names the file %s, which does not exist", doc, code)
			}
			for _, m := range flagToken.FindAllStringSubmatch(code, -1) {
				flag := m[1]
				if external[flag] != "" || strings.HasPrefix(flag, "--zap-") {
					continue // --zap-*: controller-runtime's logging flags, bound by the operator
				}
				if !strings.Contains(src, `"`+flag[2:]+`"`) && !strings.Contains(src, `"`+flag+`"`) {
					t.Errorf("%s names the flag %s, which no binary of this project defines", doc, flag)
				}
			}
			if v, ok := valuePath(code, values); ok && external[v] == "" && !valueExists(values, v) {
				t.Errorf("%s names the chart value %s, which charts/bloodraven/values.yaml does not have", doc, v)
			}
		}
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			if err := linkResolves(doc, m[1]); err != "" {
				t.Errorf("%s links %s: %s", doc, m[1], err)
			}
		}
	}
}

// Comments name files and packages too (controllers/admission.go, a
// package's doc.go): each must exist, from the root, the file's directory
// or its module's root.
func TestCommentsNameOnlyFilesThatExist(t *testing.T) {
	tops := topLevel(t)
	tracked, err := exec.Command("git", "ls-files", "*.go").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	files := strings.Fields(string(tracked))
	goFiles := map[string]bool{}
	for _, f := range files {
		goFiles[filepath.Base(f)] = true
	}
	lineRef := regexp.MustCompile(`:\d+(-\d+)?$`)
	fileToken := regexp.MustCompile(`(?:^|[\s(])([\w-]+\.go)\b`)
	for _, f := range files {
		if strings.HasPrefix(f, "hack/tools/") {
			continue
		}
		for i, line := range strings.Split(readDoc(t, f), "\n") {
			_, comment, ok := strings.Cut(line, "//")
			if !ok {
				continue
			}
			for _, m := range pathToken.FindAllStringSubmatch(comment, -1) {
				p := lineRef.ReplaceAllString(m[1], "")
				first, _, _ := strings.Cut(p, "/")
				if !tops[first] || external[p] != "" || strings.ContainsAny(p, "{}*<>") {
					continue
				}
				if !pathExists(f, p) && !(strings.HasPrefix(f, "deployclient/") && pathExists("deployclient/x", p)) {
					t.Errorf("%s:%d names %s, which does not exist", f, i+1, p)
				}
			}
			for _, m := range fileToken.FindAllStringSubmatch(comment, -1) {
				if !goFiles[m[1]] {
					t.Errorf("%s:%d names the file %s, which does not exist", f, i+1, m[1])
				}
			}
		}
	}
}

func chartValues(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	if err := yaml.Unmarshal([]byte(readDoc(t, filepath.Join("charts", "bloodraven", "values.yaml"))), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

var valueToken = regexp.MustCompile(`^([a-z][A-Za-z0-9]*(?:\.[a-z][A-Za-z0-9]*|\.\*)+)(?:=.*)?$`)

// valuePath is the dotted chart value a code span names: a.b.c (or
// a.b.c=x) whose first key is one of values.yaml's and which has no
// uppercase first key (a Go selector).
func valuePath(code string, values map[string]any) (string, bool) {
	m := valueToken.FindStringSubmatch(code)
	if m == nil {
		return "", false
	}
	first, _, _ := strings.Cut(m[1], ".")
	_, ok := values[first]
	return m[1], ok
}

func valueExists(values map[string]any, p string) bool {
	var cur any = values
	for _, k := range strings.Split(p, ".") {
		if k == "*" {
			return true
		}
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[k]; !ok {
			return false
		}
	}
	return true
}

// linkResolves checks a Markdown link to a file of the repository (and its
// #anchor, against the headings of a Markdown target); other schemes are
// not fetched.
func linkResolves(doc, target string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	file, anchor, _ := strings.Cut(target, "#")
	path := doc
	if file != "" {
		path = filepath.Join(filepath.Dir(doc), file)
		if _, err := os.Stat(path); err != nil {
			return "no such file"
		}
	}
	if anchor == "" || !strings.HasSuffix(path, ".md") {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var slugs []string
	for _, h := range heading.FindAllStringSubmatch(string(b), -1) {
		slugs = append(slugs, slug(h[1]))
	}
	if !slices.Contains(slugs, anchor) {
		return "no heading with the anchor #" + anchor
	}
	return ""
}

// slug is GitHub's anchor of a heading: lower case, letters, digits, '-'
// and '_' kept, spaces to '-', the rest dropped.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}
