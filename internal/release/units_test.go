package release

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestNotesAreTheVersionsSection(t *testing.T) {
	dir := t.TempDir()
	changelog := filepath.Join(dir, "CHANGELOG.md")
	if err := os.WriteFile(changelog, []byte("# Changelog\n\nintro\n\n## 1.1.0 — unreleased\n\n### Added\n- b\n\n## 1.0.0 — 2026-01-02\n\n- a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, version, want, wantErr string
	}{
		{name: "the newest", version: "1.1.0", want: "# Bloodraven 1.1.0\n\n### Added\n- b\n\n"},
		{name: "an older one, to the end of the file", version: "1.0.0", want: "# Bloodraven 1.0.0\n\n- a\n\n"},
		{name: "a version the CHANGELOG does not have", version: "2.0.0", wantErr: `no section "## 2.0.0"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Notes(changelog, tc.version)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !strings.HasPrefix(got, tc.want) {
				t.Fatalf("got %q (%v), want it to start %q", got, err, tc.want)
			}
		})
	}
}

func TestParsePlatforms(t *testing.T) {
	for in, want := range map[string]string{"linux/amd64, darwin/arm64": "linux/amd64 darwin/arm64", "linux": "", "": "", "/arm64": ""} {
		got, err := ParsePlatforms(in)
		var s []string
		for _, p := range got {
			s = append(s, p.String())
		}
		if (want == "") != (err != nil) || strings.Join(s, " ") != want {
			t.Errorf("ParsePlatforms(%q) = %v, %v; want %q", in, s, err, want)
		}
	}
}

// A release is built from what is committed: a tree with changes is
// refused before anything is built or written.
func TestAReleaseRefusesATreeWithUncommittedChanges(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"init", "-q"}, {"-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "x"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "edited.go"), []byte("package x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "dist")
	_, err := Build(context.Background(), Options{Root: dir, Out: out, Version: "1.0.0", BaseURL: "https://x", Registry: "r", Helm: "helm"})
	if err == nil || !strings.Contains(err.Error(), "uncommitted changes") || !strings.Contains(err.Error(), "edited.go") {
		t.Fatalf("Build: %v, want the uncommitted file named", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("a refused release wrote %s (%v)", out, err)
	}
}

func TestTheKrewManifestRefusesAnArchiveWithoutItsChecksum(t *testing.T) {
	if _, err := KrewManifest("1.0.0", "https://x", []KrewArchive{{Platform: Platform{"linux", "amd64"}, Name: "a.tar.gz", SHA256: "abc"}}); err == nil {
		t.Fatal("a short sha256 was accepted")
	}
	m, err := KrewManifest("1.0.0", "https://x/rel/", []KrewArchive{{Platform: Platform{"linux", "amd64"}, Name: "a.tar.gz", SHA256: strings.Repeat("a", 64)}})
	if err != nil || !strings.Contains(string(m), "uri: https://x/rel/a.tar.gz") || !strings.Contains(string(m), "version: v1.0.0") {
		t.Fatalf("%v\n%s", err, m)
	}
}

// Archives are the same bytes for the same content, whatever the files'
// own times: every header carries the stamp.
func TestArchivesAreTheSameBytesForTheSameFiles(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "bin")
	if err := os.WriteFile(src, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	stamp := time.Unix(1700000000, 0)
	var sums []string
	for i, name := range []string{"a.tar.gz", "b.tar.gz"} {
		mtime := time.Now().Add(time.Duration(i) * 48 * time.Hour) // the file changes its times between the two
		if err := os.Chtimes(src, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		if err := writeArchive(filepath.Join(dir, name), []archiveFile{{name: "bin", path: src, mode: 0o755}}, stamp); err != nil {
			t.Fatal(err)
		}
		s, err := fileSHA256(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, s)
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		gz, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		h, err := tar.NewReader(gz).Next()
		f.Close()
		if err != nil || !h.ModTime.Equal(stamp) || h.Uid != 0 || h.Mode != 0o755 || !gz.ModTime.IsZero() {
			t.Fatalf("%s: header %+v, gzip time %v (%v); want the stamp %v, root, 0755, no gzip time", name, h, gz.ModTime, err, stamp)
		}
	}
	if sums[0] != sums[1] {
		t.Fatalf("two archives of the same content differ: %v", sums)
	}
}

// A real release refuses a CHANGELOG section still headed "unreleased"
// (a trial accepts it), and an -out that would replace the repository.
func TestAReleaseRefusesUndatedNotesAndAnOutThatIsTheRepository(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "CHANGELOG.md"), []byte("## 1.0.0 — unreleased\n\n- a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}, {"-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q", "-m", "x"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	o := Options{Root: dir, Out: filepath.Join(dir, "dist"), Version: "1.0.0", BaseURL: "https://x", Registry: "r", Helm: "helm"}
	if _, err := Build(context.Background(), o); err == nil || !strings.Contains(err.Error(), `headed "unreleased"`) {
		t.Fatalf("undated notes: %v", err)
	}
	for _, out := range []string{dir, filepath.Dir(dir), "/"} {
		o.Out, o.AllowDirty = out, true
		if _, err := Build(context.Background(), o); err == nil || !strings.Contains(err.Error(), "would replace the repository") {
			t.Fatalf("-out %s: %v", out, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "CHANGELOG.md")); err != nil {
		t.Fatalf("a refused release removed the repository's files: %v", err)
	}
}
