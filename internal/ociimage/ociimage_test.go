package ociimage

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// build compiles a static linux/amd64 binary of pkg in the module at dir
// into a file called name,
// its main.version stamped.
func build(t *testing.T, dir, pkg, name, version string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-trimpath",
		"-ldflags", "-s -w -X main.version="+version, "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// The images `make image` writes, built the same way from the operator and
// the pipeline CLI: read back from the layout, each runs its own binary as
// the nonroot user, names the version in its label and in --version, and
// carries nothing else to run (no shell).
func TestEachImageRunsItsBinaryAsNonRoot(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the image is linux/amd64: its binary runs only there")
	}
	const version = "9.9.9-imagetest"
	tests := []struct {
		name, moduleDir, pkg string
	}{
		{"bloodraven", "../..", "./cmd/bloodraven"},
		{"bloodraven-deploy", "../../deployclient", "./cmd/bloodraven-deploy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Spec{Binary: build(t, tc.moduleDir, tc.pkg, tc.name, version), Name: tc.name, Version: version,
				Source: "https://github.com/shipstream/bloodraven"}
			img, err := Build(s)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "layout")
			tag := "registry.example/" + tc.name + ":" + version
			if err := WriteLayout(dir, tag, img); err != nil {
				t.Fatal(err)
			}
			size, err := Verify(dir, s, tag)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %.1f MiB compressed", tc.name, float64(size)/(1<<20))
			back, _, err := ReadLayout(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, absent := range []string{"bin/sh", "usr/bin/env"} {
				if _, _, err := Extract(back, absent); err == nil {
					t.Errorf("the image holds %s", absent)
				}
			}
			passwd, _, err := Extract(back, "etc/passwd")
			if err != nil || !strings.Contains(string(passwd), "nonroot:x:65532:65532") {
				t.Errorf("/etc/passwd does not name the nonroot user: %q, %v", passwd, err)
			}
			// The same binary makes the same image.
			again, err := Build(s)
			if err != nil {
				t.Fatal(err)
			}
			d1, _ := img.Digest()
			d2, _ := again.Digest()
			if d1 != d2 {
				t.Errorf("two builds of one binary: digests %s and %s", d1, d2)
			}
			// What Verify refuses: a label or a binary of another version,
			// another tag.
			if _, err := Verify(dir, Spec{Binary: s.Binary, Name: s.Name, Version: "0.0.1"}, tag); err == nil {
				t.Error("Verify accepted a version the image does not carry")
			}
			if _, err := Verify(dir, s, "registry.example/other:1"); err == nil {
				t.Error("Verify accepted another tag")
			}
		})
	}
}

func TestBuildRefusesAnIncompleteSpec(t *testing.T) {
	tests := map[string]Spec{
		"no name":          {Binary: "/bin/true", Version: "1"},
		"no version":       {Binary: "/bin/true", Name: "x"},
		"a missing binary": {Binary: filepath.Join(t.TempDir(), "absent"), Name: "x", Version: "1"},
	}
	for name, s := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := Build(s); err == nil {
				t.Fatal("Build accepted it")
			}
		})
	}
}

// Also ships more binaries beside the entrypoint, each executable in
// /usr/local/bin, and the image stays the same, byte for byte, build to
// build (the map's order does not leak into the layer).
func TestAlsoShipsMoreBinariesBesideTheEntrypoint(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	s := Spec{Binary: write("migrate", "migrate-bytes"), Name: "migrate", Version: "1",
		Also: map[string]string{"bloodraven-deploy": write("bd", "deploy-bytes"), "zz": write("zz", "zz-bytes")}}
	img, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"usr/local/bin/migrate": "migrate-bytes",
		"usr/local/bin/bloodraven-deploy": "deploy-bytes", "usr/local/bin/zz": "zz-bytes"} {
		got, hdr, err := Extract(img, name)
		if err != nil || string(got) != want || hdr.Mode&0o111 == 0 {
			t.Errorf("%s: %q (%v), want %q executable", name, got, err, want)
		}
	}
	for range 5 {
		again, err := Build(s)
		if err != nil {
			t.Fatal(err)
		}
		d1, _ := img.Digest()
		d2, _ := again.Digest()
		if d1 != d2 {
			t.Fatalf("two builds of one spec: digests %s and %s", d1, d2)
		}
	}
}
