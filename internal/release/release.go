package release

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/shipstream/bloodraven/internal/ociimage"
)

// Platform is an os/arch pair, as GOOS and GOARCH spell them.
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// ParsePlatforms reads "linux/amd64,darwin/arm64".
func ParsePlatforms(s string) ([]Platform, error) {
	var out []Platform
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		os, arch, ok := strings.Cut(f, "/")
		if !ok || os == "" || arch == "" {
			return nil, fmt.Errorf("platform %q: want os/arch", f)
		}
		out = append(out, Platform{os, arch})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no platform in %q", s)
	}
	return out, nil
}

// Defaults: what a release ships.
var (
	ImagePlatforms = []Platform{{"linux", "amd64"}, {"linux", "arm64"}}
	CLIPlatforms   = []Platform{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}}
)

// Options say what to build and where.
type Options struct {
	// Root is the repository's root.
	Root string
	// Out is the dist directory; it is replaced.
	Out string
	// Version is the release (file VERSION), e.g. 0.2.0; BinaryVersion is
	// what the binaries' --version prints (the release and the commit).
	Version, BinaryVersion string
	// BaseURL is where the assets will be downloaded from: the krew
	// manifest's and index.yaml's URLs are it and the file's name.
	BaseURL string
	// Registry is the images' repository prefix, e.g. ghcr.io/shipstream.
	Registry string
	// Helm is the helm binary.
	Helm string
	// ImagePlatforms and CLIPlatforms: the defaults when nil.
	ImagePlatforms, CLIPlatforms []Platform
	// AllowDirty builds from a tree with uncommitted changes (tests; a
	// release refuses them).
	AllowDirty bool
	// Log receives progress lines; nil: discarded.
	Log io.Writer
}

// Result is what Build wrote, by role, as paths relative to Out.
type Result struct {
	Images   map[string]string // image name: its OCI layout directory
	SBOMs    map[string]string // image name: its SBOM
	Archives []string
	Chart    string // the packaged chart
	ChartOCI string // its OCI layout
	Index    string // Helm repository index
	Krew     string
	Notes    string
	Sums     string
}

// An image of the release: which command, in which module.
type imageSpec struct {
	name, module, pkg, description string
}

var images = []imageSpec{
	{"bloodraven", ".", "./cmd/bloodraven", "Bloodraven: MySQL failover groups and deployment coordination"},
	{"bloodraven-deploy", "deployclient", "./cmd/bloodraven-deploy", "bloodraven-deploy: the pipeline client of /deploy/v1"},
}

// clis are the archived commands; the plugin's archive also carries its
// completion shim.
var clis = []struct {
	name, module, pkg string
	extra             []string // files from the repository root, archived by base name
}{
	{"bloodraven-deploy", "deployclient", "./cmd/bloodraven-deploy", nil},
	{"kubectl-bloodraven", ".", "./cmd/kubectl-bloodraven", []string{"cmd/kubectl-bloodraven/kubectl_complete-bloodraven"}},
}

const source = "https://github.com/shipstream/bloodraven"

// Build writes the release into o.Out.
func Build(ctx context.Context, o Options) (*Result, error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.ImagePlatforms == nil {
		o.ImagePlatforms = ImagePlatforms
	}
	if o.CLIPlatforms == nil {
		o.CLIPlatforms = CLIPlatforms
	}
	if o.Version == "" || o.BaseURL == "" || o.Registry == "" || o.Helm == "" {
		return nil, fmt.Errorf("release: Version, BaseURL, Registry and Helm are required")
	}
	if o.BinaryVersion == "" {
		o.BinaryVersion = o.Version
	}
	if !o.AllowDirty {
		out, err := git(ctx, o.Root, "status", "--porcelain")
		if err != nil {
			return nil, err
		}
		if out != "" {
			return nil, fmt.Errorf("release: the tree has uncommitted changes; commit them (or RELEASE_ALLOW_DIRTY=1 for a trial):\n%s", out)
		}
	}
	notes, unreleased, err := notesOf(filepath.Join(o.Root, "CHANGELOG.md"), o.Version)
	if err != nil {
		return nil, err
	}
	if unreleased && !o.AllowDirty {
		return nil, fmt.Errorf("release: CHANGELOG.md's section of %s is headed \"unreleased\": give it the release's date first", o.Version)
	}
	stamp, err := commitTime(ctx, o.Root)
	if err != nil {
		return nil, err
	}
	// Written beside Out and renamed into place once whole.
	final, err := safeOut(o.Root, o.Out)
	if err != nil {
		return nil, err
	}
	o.Out = final + ".partial"
	if err := os.RemoveAll(o.Out); err != nil {
		return nil, fmt.Errorf("clear %s: %w", o.Out, err)
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(o.Out) // a failed build's; gone once renamed
	work, err := os.MkdirTemp("", "bloodraven-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	b := &builder{o: o, work: work, stamp: stamp, built: map[string]string{}}
	res := &Result{Images: map[string]string{}, SBOMs: map[string]string{}}
	for _, im := range images {
		if err := b.image(ctx, im, res); err != nil {
			return nil, err
		}
	}
	for _, c := range clis {
		for _, p := range o.CLIPlatforms {
			bin, err := b.binary(ctx, c.name, c.module, c.pkg, p)
			if err != nil {
				return nil, err
			}
			name := fmt.Sprintf("%s_%s_%s_%s.tar.gz", c.name, o.Version, p.OS, p.Arch)
			files := []archiveFile{{name: c.name, path: bin, mode: 0o755}, {name: "LICENSE", path: filepath.Join(o.Root, "LICENSE"), mode: 0o644}}
			for _, e := range c.extra {
				files = append(files, archiveFile{name: filepath.Base(e), path: filepath.Join(o.Root, e), mode: 0o755})
			}
			if err := writeArchive(filepath.Join(o.Out, name), files, stamp); err != nil {
				return nil, err
			}
			res.Archives = append(res.Archives, name)
			fmt.Fprintf(o.Log, "archive %s\n", name)
		}
	}
	if err := b.chart(ctx, res); err != nil {
		return nil, err
	}
	if err := b.krew(res); err != nil {
		return nil, err
	}
	res.Notes = "RELEASE-NOTES.md"
	if err := os.WriteFile(filepath.Join(o.Out, res.Notes), []byte(notes), 0o644); err != nil {
		return nil, err
	}
	res.Sums = "SHA256SUMS"
	if err := writeSums(o.Out, res.Sums); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(final); err != nil {
		return nil, fmt.Errorf("clear %s: %w", final, err)
	}
	if err := os.Rename(o.Out, final); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Log, "release %s written to %s\n", o.Version, final)
	return res, nil
}

// safeOut is out made absolute, refused when replacing it would remove the
// repository or one of its parents.
func safeOut(root, out string) (string, error) {
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	absOut, err := filepath.Abs(out)
	if err != nil {
		return "", err
	}
	if rel, err := filepath.Rel(absOut, absRoot); err == nil && (rel == "." || !strings.HasPrefix(rel, "..")) {
		return "", fmt.Errorf("release: -out %s would replace the repository %s: name a directory of its own, such as dist", out, absRoot)
	}
	return absOut, nil
}

type builder struct {
	o     Options
	work  string
	stamp time.Time
	// built: a binary already built for a platform, by name/os/arch.
	built map[string]string
}

// binary cross-compiles one command (static, CGO off, -trimpath, stripped,
// the version stamped) for p, once per release.
func (b *builder) binary(ctx context.Context, name, module, pkg string, p Platform) (string, error) {
	key := name + "/" + p.String()
	if out, ok := b.built[key]; ok {
		return out, nil
	}
	out := filepath.Join(b.work, name+"-"+p.OS+"-"+p.Arch)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+b.o.BinaryVersion, "-o", out, pkg)
	cmd.Dir = filepath.Join(b.o.Root, module)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch)
	start := time.Now()
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s for %s: %w\n%s", pkg, p, err, msg)
	}
	fmt.Fprintf(b.o.Log, "built %s for %s in %s\n", name, p, time.Since(start).Round(time.Second))
	b.built[key] = out
	return out, nil
}

// image builds one image per image platform, their index, its layout and
// the SBOM of the binaries.
func (b *builder) image(ctx context.Context, im imageSpec, res *Result) error {
	var imgs []v1.Image
	var bins []string
	for _, p := range b.o.ImagePlatforms {
		bin, err := b.binary(ctx, im.name, im.module, im.pkg, p)
		if err != nil {
			return err
		}
		spec := ociimage.Spec{Binary: bin, Name: im.name, Version: b.o.Version, Description: im.description, Source: source, OS: p.OS, Arch: p.Arch}
		img, err := ociimage.Build(spec)
		if err != nil {
			return fmt.Errorf("image %s for %s: %w", im.name, p, err)
		}
		if err := ociimage.VerifyImage(img, spec); err != nil {
			return fmt.Errorf("image %s for %s: %w", im.name, p, err)
		}
		imgs = append(imgs, img)
		bins = append(bins, bin)
	}
	idx, err := ociimage.Index(imgs...)
	if err != nil {
		return err
	}
	tag := b.o.Registry + "/" + im.name + ":" + b.o.Version
	rel := filepath.Join("oci", im.name)
	if err := ociimage.WriteIndexLayout(filepath.Join(b.o.Out, rel), tag, idx); err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	sbom, err := SBOM(SBOMSubject{Name: b.o.Registry + "/" + im.name, Version: b.o.Version, Digest: digest.String()}, b.stamp, bins...)
	if err != nil {
		return fmt.Errorf("SBOM of %s: %w", im.name, err)
	}
	sbomName := im.name + ".cdx.json"
	if err := os.WriteFile(filepath.Join(b.o.Out, sbomName), sbom, 0o644); err != nil {
		return err
	}
	res.Images[im.name], res.SBOMs[im.name] = rel, sbomName
	fmt.Fprintf(b.o.Log, "image %s %s (%d platforms), SBOM %s\n", tag, digest, len(imgs), sbomName)
	return nil
}

// chart packages the chart, indexes it, and lays it out as an OCI artifact.
func (b *builder) chart(ctx context.Context, res *Result) error {
	out, err := run(ctx, b.o.Root, b.o.Helm, "package", "charts/bloodraven", "--version", b.o.Version, "--app-version", b.o.Version, "-d", b.o.Out)
	if err != nil {
		return err
	}
	res.Chart = fmt.Sprintf("bloodraven-%s.tgz", b.o.Version)
	if _, err := os.Stat(filepath.Join(b.o.Out, res.Chart)); err != nil {
		return fmt.Errorf("helm package wrote no %s: %s", res.Chart, out)
	}
	if _, err := run(ctx, b.o.Root, b.o.Helm, "repo", "index", b.o.Out, "--url", b.o.BaseURL); err != nil {
		return err
	}
	res.Index = "index.yaml"
	res.ChartOCI = filepath.Join("oci", "chart-bloodraven")
	tgz, err := os.ReadFile(filepath.Join(b.o.Out, res.Chart))
	if err != nil {
		return err
	}
	if err := WriteChartLayout(filepath.Join(b.o.Out, res.ChartOCI), tgz, b.o.Version, b.o.Registry+"/charts/bloodraven:"+b.o.Version); err != nil {
		return err
	}
	fmt.Fprintf(b.o.Log, "chart %s, %s, %s\n", res.Chart, res.Index, res.ChartOCI)
	return nil
}

// krew writes the plugin's krew manifest over its archives.
func (b *builder) krew(res *Result) error {
	var archives []KrewArchive
	for _, p := range b.o.CLIPlatforms {
		name := fmt.Sprintf("kubectl-bloodraven_%s_%s_%s.tar.gz", b.o.Version, p.OS, p.Arch)
		sum, err := fileSHA256(filepath.Join(b.o.Out, name))
		if err != nil {
			return err
		}
		archives = append(archives, KrewArchive{Platform: p, Name: name, SHA256: sum})
	}
	m, err := KrewManifest(b.o.Version, b.o.BaseURL, archives)
	if err != nil {
		return err
	}
	res.Krew = "bloodraven.yaml" // krew's file name is the plugin's
	return os.WriteFile(filepath.Join(b.o.Out, res.Krew), m, 0o644)
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	return run(ctx, dir, "git", args...)
}

func run(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String()), nil
}

// commitTime is HEAD's commit time: every time stamp of the release.
func commitTime(ctx context.Context, root string) (time.Time, error) {
	out, err := git(ctx, root, "log", "-1", "--format=%ct")
	if err != nil {
		return time.Time{}, err
	}
	sec, err := strconv.ParseInt(out, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("commit time %q: %w", out, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}
