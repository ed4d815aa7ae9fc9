package bloodraven_test

import (
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/shipstream/bloodraven"

// layers of the packages that ship, lowest first: a package imports only
// packages of lower layers (docs/development.md, "Layout"). A shipped
// package missing here fails the test, so a new one is placed on purpose.
var layers = [][]string{
	{"", "api/v1alpha1", "leases", "deployclient/wire", "deployapi/authn", "leaseguard", "server", "store", "internal/logbridge", "internal/childproc"},
	{"topology", "scheme", "installcheck", "webhook"},
	{"policy", "topology/memory", "topology/mysql", "topology/prober"},
	{"store/leasestore"},
	{"store/gate", "store/deployrun", "kubectlplugin"},
	{"controllers", "deployapi"},
	{"operator"},
	{"cmd/bloodraven", "cmd/kubectl-bloodraven"},
}

// harness reports a package that does not ship: the tests, the playground,
// the tools' sources.
func harness(rel string) bool {
	for _, p := range []string{"e2e", "hack", "charts", "internal"} {
		if rel == p || strings.HasPrefix(rel, p+"/") {
			return rel != "internal/logbridge" && rel != "internal/childproc"
		}
	}
	return false
}

func goList(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		var ee *exec.ExitError
		if e, ok := err.(*exec.ExitError); ok {
			ee = e
		}
		t.Fatalf("go list %v: %v\n%s", args, err, ee.Stderr)
	}
	return string(out)
}

// No shipped package imports one of its own layer or above, and none
// imports a test harness.
func TestNoShippedPackageImportsUpward(t *testing.T) {
	layer := map[string]int{}
	for i, l := range layers {
		for _, p := range l {
			layer[p] = i
		}
	}
	rel := func(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, module), "/") }
	for _, line := range strings.Split(strings.TrimSpace(goList(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...")), "\n") {
		f := strings.Fields(line)
		pkg := rel(f[0])
		if harness(pkg) {
			continue
		}
		li, ok := layer[pkg]
		if !ok {
			t.Errorf("%s ships but has no layer in layout_test.go", pkg)
			continue
		}
		for _, imp := range f[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			r := rel(imp)
			if harness(r) {
				t.Errorf("%s imports the test harness %s", pkg, r)
				continue
			}
			if lj, ok := layer[r]; ok && lj >= li {
				t.Errorf("%s (layer %d) imports %s (layer %d): an upward or sideways import", pkg, li, r, lj)
			}
		}
	}
}

// The root lists what ships (each directory holds a package that is not
// only tests) and the named places for the rest.
func TestTheRootListsWhatShips(t *testing.T) {
	named := []string{"docs", "charts", "examples", "hack", "internal", "e2e", "config", ".ci"}
	files := []string{".gitignore", "CHANGELOG.md", "CONTRIBUTING.md", "LICENSE", "Makefile", "README.md", "SECURITY.md", "VERSION", "go.mod", "go.sum", "version.go", "layout_test.go", "doctruth_test.go"}
	out, err := exec.Command("git", "ls-files").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	shipped := map[string]bool{"deployclient": true} // its own module: the pipeline client
	for _, line := range strings.Split(strings.TrimSpace(goList(t, "-f", "{{.ImportPath}} {{len .GoFiles}}", "./...")), "\n") {
		f := strings.Fields(line)
		if f[1] != "0" {
			top, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/"), "/")
			shipped[top] = true
		}
	}
	seen := map[string]bool{}
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		top, rest, dir := strings.Cut(f, "/")
		if seen[top] {
			continue
		}
		seen[top] = true
		switch {
		case !dir && slices.Contains(files, top):
		case dir && slices.Contains(named, top):
		case dir && shipped[top] && top != "e2e":
		default:
			t.Errorf("the root lists %s (%s): it neither ships nor is one of %v", top, path.Join(top, rest), append(named, files...))
		}
	}
}
