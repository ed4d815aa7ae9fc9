package binary_test

import (
	"debug/buildinfo"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// clientModule is the pipeline client's module directory, from this
// package's directory.
var clientModule = filepath.Join("..", "..", "..", "deployclient")

// The deployclient package imports only the standard library and its own
// wire types (themselves stdlib only): a pipeline that `go get`s it
// inherits none of the operator's dependencies.
func TestTheClientPackageImportsOnlyTheStandardLibrary(t *testing.T) {
	out := goCmd(t, clientModule, nil, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".")
	for _, p := range strings.Fields(out) {
		if p != "github.com/shipstream/bloodraven/deployclient" && p != "github.com/shipstream/bloodraven/deployclient/wire" {
			t.Errorf("deployclient depends on %s, outside the standard library", p)
		}
	}
}

// bloodraven-deploy builds for linux and darwin, amd64 and arm64, with cgo
// off; the linux binary is static and links no k8s.io package.
func TestTheCLIBuildsStaticForFourPlatformsWithoutKubernetes(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"} {
		goos, goarch, _ := strings.Cut(p, "/")
		bin := filepath.Join(dir, "bloodraven-deploy-"+goos+"-"+goarch)
		goCmd(t, clientModule, []string{"GOOS=" + goos, "GOARCH=" + goarch, "CGO_ENABLED=0"},
			"build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd/bloodraven-deploy")
		info, err := buildinfo.ReadFile(bin)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, d := range info.Deps {
			if strings.HasPrefix(d.Path, "k8s.io/") || strings.HasPrefix(d.Path, "sigs.k8s.io/") {
				t.Errorf("%s: the binary links %s", p, d.Path)
			}
		}
		st, _ := os.Stat(bin)
		t.Logf("%s: %d bytes (%.1f MiB), %d modules linked", p, st.Size(), float64(st.Size())/(1<<20), len(info.Deps))
		if goos == "linux" {
			assertStatic(t, bin)
		}
	}
}

// assertStatic: no program interpreter and no shared-library dependency.
func assertStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Errorf("%s has a program interpreter: it is dynamically linked", bin)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v", bin, libs)
	}
}

func goCmd(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
