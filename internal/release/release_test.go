package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/shipstream/bloodraven"
	"github.com/shipstream/bloodraven/internal/ociimage"
	"github.com/shipstream/bloodraven/internal/testenv"
)

const (
	testBaseURL  = "https://downloads.example.com/bloodraven/v9"
	testRegistry = "registry.example.com/platform"
)

// testCLIPlatforms: the test builds the archives of three of the four CLI
// platforms (darwin/amd64 is left out: it is the one platform whose
// Kubernetes libraries nothing else here compiles, minutes on a cold
// cache); the images are built for both of theirs.
var testCLIPlatforms = []Platform{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "arm64"}}

// The release, built as `make release` builds it, read back by other code
// than wrote it: both platforms in each image index, each image checked
// (the amd64 binary answers --version, the arm64 one is an arm64 ELF
// file), each SBOM naming every direct dependency that `go list` says is
// linked, every checksum, the archives' contents and machines, the krew
// manifest's URIs and checksums, the chart's index, its OCI layout, its
// installation from the package (a server dry run against a real API
// server), and the notes.
func TestTheReleaseReadsBack(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the release: minutes")
	}
	root := testenv.RepoRoot()
	version := bloodraven.Release()
	out := t.TempDir()
	// What `make release` runs (hack/release), in its own process: its
	// compression does not run under this test's race detector.
	var platforms []string
	for _, p := range testCLIPlatforms {
		platforms = append(platforms, p.String())
	}
	cmd := exec.Command("go", "run", "./hack/release", "-root", ".", "-out", out, "-version", version, "-binary-version", version+"+test",
		"-base-url", testBaseURL, "-registry", testRegistry, "-helm", filepath.Join(root, "bin", "helm"),
		"-cli-platforms", strings.Join(platforms, ","), "-allow-dirty")
	cmd.Dir = root
	log, err := cmd.CombinedOutput()
	t.Logf("make release's log:\n%s", log)
	if err != nil {
		t.Fatal(err)
	}
	res := &Result{Images: map[string]string{}, SBOMs: map[string]string{}, Chart: "bloodraven-" + version + ".tgz",
		ChartOCI: filepath.Join("oci", "chart-bloodraven"), Index: "index.yaml", Krew: "bloodraven.yaml",
		Notes: "RELEASE-NOTES.md", Sums: "SHA256SUMS"}
	for _, im := range images {
		res.Images[im.name], res.SBOMs[im.name] = filepath.Join("oci", im.name), im.name+".cdx.json"
	}
	for _, c := range clis {
		for _, p := range testCLIPlatforms {
			res.Archives = append(res.Archives, fmt.Sprintf("%s_%s_%s_%s.tar.gz", c.name, version, p.OS, p.Arch))
		}
	}

	t.Run("each image is an index of both platforms, each image checked", func(t *testing.T) {
		for name, dir := range res.Images {
			idx, tag, err := ociimage.ReadIndexLayout(filepath.Join(out, dir))
			if err != nil {
				t.Fatal(err)
			}
			if want := testRegistry + "/" + name + ":" + version; tag != want {
				t.Errorf("%s: tag %q, want %q", name, tag, want)
			}
			m, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			var platforms []string
			for _, d := range m.Manifests {
				platforms = append(platforms, d.Platform.OS+"/"+d.Platform.Architecture)
				img, err := idx.Image(d.Digest)
				if err != nil {
					t.Fatal(err)
				}
				spec := ociimage.Spec{Name: name, Version: version, OS: d.Platform.OS, Arch: d.Platform.Architecture}
				if err := ociimage.VerifyImage(img, spec); err != nil {
					t.Errorf("%s %s: %v", name, d.Platform.Architecture, err)
				}
			}
			slices.Sort(platforms)
			if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
				t.Errorf("%s: platforms %v, want linux/amd64 and linux/arm64", name, platforms)
			}
		}
	})

	t.Run("each SBOM lists the direct dependencies its binary links", func(t *testing.T) {
		for _, tc := range []struct{ image, module, pkg string }{
			{"bloodraven", root, "./cmd/bloodraven"},
			{"bloodraven-deploy", filepath.Join(root, "deployclient"), "./cmd/bloodraven-deploy"},
		} {
			var bom cdxBOM
			if err := json.Unmarshal(readFile(t, filepath.Join(out, res.SBOMs[tc.image])), &bom); err != nil {
				t.Fatal(err)
			}
			idx, _, err := ociimage.ReadIndexLayout(filepath.Join(out, res.Images[tc.image]))
			if err != nil {
				t.Fatal(err)
			}
			digest, _ := idx.Digest()
			if bom.BOMFormat != "CycloneDX" || bom.SpecVersion != "1.5" || !strings.Contains(bom.Metadata.Component.PURL, digest.String()) {
				t.Fatalf("%s: %s %s, subject %s; want CycloneDX 1.5 about the index %s", tc.image, bom.BOMFormat, bom.SpecVersion, bom.Metadata.Component.PURL, digest)
			}
			listed := map[string]string{}
			for _, c := range bom.Components {
				listed[c.Name] = c.Version
			}
			// A module replaced by a directory of this tree is this
			// release's own: the SBOM gives it the release's version.
			direct := goList(t, tc.module, "list", "-m", "-f",
				"{{if and (not .Main) (not .Indirect)}}{{.Path}} {{if and .Replace (not .Replace.Version)}}v"+version+"{{else}}{{.Version}}{{end}}{{end}}", "all")
			linked := goList(t, tc.module, "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", tc.pkg)
			n := 0
			for _, line := range direct {
				path, ver, _ := strings.Cut(line, " ")
				if !slices.Contains(linked, path) {
					continue // a test's or a tool's dependency: not in the binary
				}
				n++
				if got, ok := listed[path]; !ok || (ver != "" && got != ver) {
					t.Errorf("%s: the SBOM lists %s at %q, go list says %q", tc.image, path, got, ver)
				}
			}
			if n == 0 {
				t.Fatalf("%s: go list found no direct dependency linked into %s", tc.image, tc.pkg)
			}
			t.Logf("%s: %d components; all %d direct dependencies it links are listed", tc.image, len(bom.Components), n)
		}
	})

	sums := map[string]string{}
	t.Run("every checksum matches, and every asset has one", func(t *testing.T) {
		sc := bufio.NewScanner(bytes.NewReader(readFile(t, filepath.Join(out, res.Sums))))
		for sc.Scan() {
			sum, name, ok := strings.Cut(sc.Text(), "  ")
			if !ok {
				t.Fatalf("SHA256SUMS line %q", sc.Text())
			}
			got, err := fileSHA256(filepath.Join(out, name))
			if err != nil || got != sum {
				t.Errorf("%s: sha256 %s (%v), SHA256SUMS says %s", name, got, err, sum)
			}
			sums[name] = sum
		}
		entries, _ := os.ReadDir(out)
		for _, e := range entries {
			if e.Type().IsRegular() && e.Name() != res.Sums && sums[e.Name()] == "" {
				t.Errorf("%s has no line in SHA256SUMS", e.Name())
			}
		}
	})

	t.Run("the archives hold their binaries for their platform, LICENSE and the shim", func(t *testing.T) {
		license := readFile(t, filepath.Join(root, "LICENSE"))
		if len(res.Archives) != 2*len(testCLIPlatforms) {
			t.Fatalf("%d archives, want %d", len(res.Archives), 2*len(testCLIPlatforms))
		}
		for _, name := range res.Archives {
			var cmd, goos, goarch string
			if _, err := fmt.Sscanf(strings.NewReplacer("_", " ", ".tar.gz", "").Replace(name), "%s "+version+" %s %s", &cmd, &goos, &goarch); err != nil {
				t.Fatalf("archive name %s: %v", name, err)
			}
			files := untar(t, filepath.Join(out, name))
			want := []string{"LICENSE", cmd}
			if cmd == "kubectl-bloodraven" {
				want = append(want, "kubectl_complete-bloodraven")
			}
			var got []string
			for f := range files {
				got = append(got, f)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s holds %v, want %v", name, got, want)
			}
			if !bytes.Equal(files["LICENSE"], license) {
				t.Errorf("%s: LICENSE is not the repository's", name)
			}
			if err := ociimage.CheckMachine(files[cmd], goos, goarch); err != nil {
				t.Errorf("%s: %v", name, err)
			}
			if goos == "linux" && goarch == "amd64" {
				exe := filepath.Join(t.TempDir(), cmd)
				if err := os.WriteFile(exe, files[cmd], 0o755); err != nil {
					t.Fatal(err)
				}
				v, err := exec.Command(exe, "--version").CombinedOutput()
				if err != nil || !strings.Contains(string(v), version+"+test") {
					t.Errorf("%s --version: %q (%v), want it to name %s+test", cmd, v, err, version)
				}
			}
		}
	})

	t.Run("the krew manifest points at the archives with their checksums", func(t *testing.T) {
		var m krewPlugin
		if err := yaml.UnmarshalStrict(readFile(t, filepath.Join(out, res.Krew)), &m); err != nil {
			t.Fatal(err)
		}
		if m.Kind != "Plugin" || m.Metadata.Name != "bloodraven" || m.Spec.Version != "v"+version || len(m.Spec.Platforms) != len(testCLIPlatforms) ||
			!strings.Contains(m.Spec.Caveats, "kubectl_complete-bloodraven") {
			t.Fatalf("manifest: %+v", m)
		}
		for _, p := range m.Spec.Platforms {
			file, ok := strings.CutPrefix(p.URI, testBaseURL+"/")
			if !ok || strings.Contains(file, "/") {
				t.Errorf("uri %s is not the base URL and an archive's name", p.URI)
				continue
			}
			want := fmt.Sprintf("kubectl-bloodraven_%s_%s_%s.tar.gz", version, p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"])
			if file != want || p.SHA256 != sums[file] || p.SHA256 == "" {
				t.Errorf("platform %v: %s sha256 %s; want %s, whose sha256 is %s", p.Selector.MatchLabels, file, p.SHA256, want, sums[want])
			}
			files := untar(t, filepath.Join(out, file))
			for _, f := range p.Files {
				if _, ok := files[f.From]; !ok {
					t.Errorf("%s: files names %s, which the archive lacks", file, f.From)
				}
			}
		}
	})

	t.Run("the chart: its index, its OCI layout, and an install from the package", func(t *testing.T) {
		var index struct {
			Entries map[string][]struct {
				Version, Digest string
				URLs            []string `json:"urls"`
			} `json:"entries"`
		}
		if err := yaml.Unmarshal(readFile(t, filepath.Join(out, res.Index)), &index); err != nil {
			t.Fatal(err)
		}
		e := index.Entries["bloodraven"]
		if len(e) != 1 || e[0].Version != version || e[0].Digest != sums[res.Chart] || len(e[0].URLs) != 1 || e[0].URLs[0] != testBaseURL+"/"+res.Chart {
			t.Errorf("index.yaml: %+v; want version %s, digest %s, url %s/%s", e, version, sums[res.Chart], testBaseURL, res.Chart)
		}
		lp, err := layout.ImageIndexFromPath(filepath.Join(out, res.ChartOCI))
		if err != nil {
			t.Fatal(err)
		}
		im, err := lp.IndexManifest()
		if err != nil || len(im.Manifests) != 1 {
			t.Fatalf("chart layout: %v %+v", err, im)
		}
		img, err := lp.Image(im.Manifests[0].Digest)
		if err != nil {
			t.Fatal(err)
		}
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Config.MediaType) != HelmConfigMediaType || len(m.Layers) != 1 || string(m.Layers[0].MediaType) != HelmChartMediaType ||
			m.Layers[0].Digest.Hex != sums[res.Chart] {
			t.Errorf("chart layout manifest: config %s, layers %+v; want Helm's media types and the package's digest %s", m.Config.MediaType, m.Layers, sums[res.Chart])
		}
		if ref := im.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; ref != testRegistry+"/charts/bloodraven:"+version {
			t.Errorf("chart layout ref %q", ref)
		}
		var meta struct{ Name, Version string }
		if raw, err := img.RawConfigFile(); err != nil || json.Unmarshal(raw, &meta) != nil || meta.Name != "bloodraven" || meta.Version != version {
			t.Errorf("chart layout config: %+v (%v)", meta, err)
		}
		installFromPackage(t, root, filepath.Join(out, res.Chart))
	})

	t.Run("the notes are the CHANGELOG's section of the version", func(t *testing.T) {
		notes := string(readFile(t, filepath.Join(out, res.Notes)))
		if !strings.HasPrefix(notes, "# Bloodraven "+version+"\n") || !strings.Contains(notes, "### Added") {
			t.Errorf("notes:\n%s", notes)
		}
	})
}

// installFromPackage installs the packaged chart as a server dry run
// against a real API server: the templates render from the package and
// every object is accepted.
func installFromPackage(t *testing.T, root, pkg string) {
	t.Helper()
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bloodraven"}}); err != nil {
		t.Fatal(err)
	}
	u, err := env.Environment.AddUser(envtest.User{Name: "release-test", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kubeconfig"), kc, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, "bin", "helm"), "install", "bloodraven", pkg, "--namespace", "bloodraven", "--dry-run=server")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(dir, "kubeconfig"),
		"HELM_CACHE_HOME="+dir, "HELM_CONFIG_HOME="+dir, "HELM_DATA_HOME="+dir)
	got, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(got), "kind: Deployment") {
		t.Fatalf("helm install --dry-run=server of the package: %v\n%s", err, got)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// untarred: archives already read, by path.
var untarred = map[string]map[string][]byte{}

// untar reads a tar.gz's regular files by name (once per archive).
func untar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	if files, ok := untarred[path]; ok {
		return files
	}
	files := untarOnce(t, path)
	untarred[path] = files
	return files
}

func untarOnce(t *testing.T, path string) map[string][]byte {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(readFile(t, path)))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = b
	}
}

// goList runs the go command in dir for linux/amd64 and returns its
// non-empty lines.
func goList(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=0")
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
