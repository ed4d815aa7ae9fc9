package ociimage

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"debug/macho"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NonRoot is the user and group the image runs as: distroless's "nonroot",
// so that a restricted PodSecurity profile (runAsNonRoot) admits it
// without a runAsUser of the chart's own.
const NonRoot = 65532

// Spec is one image: a static binary as its only program.
type Spec struct {
	// Binary is the path of the static binary to ship.
	Binary string
	// Name is its file name in the image, under /usr/local/bin, and the
	// image's title.
	Name string
	// Version is the org.opencontainers.image.version label.
	Version string
	// Description and Source become the matching OCI labels.
	Description, Source string
	// Args are the entrypoint's default arguments (the image's Cmd).
	Args []string
	// Also are more static binaries shipped beside it in /usr/local/bin
	// (on the image's PATH), by file name: the path of each on this
	// machine. A migration image carries bloodraven-deploy beside its tool.
	Also map[string]string
	// OS and Arch are the image's platform, which the binaries must be
	// built for; linux and amd64 when empty.
	OS, Arch string
}

// Platform is the image's os/arch.
func (s Spec) Platform() (os, arch string) {
	os, arch = s.OS, s.Arch
	if os == "" {
		os = "linux"
	}
	if arch == "" {
		arch = "amd64"
	}
	return os, arch
}

// Entrypoint is the path of the binary in the image.
func (s Spec) Entrypoint() string { return "/usr/local/bin/" + s.Name }

// Labels are the image's OCI annotation labels.
func (s Spec) Labels() map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":    s.Name,
		"org.opencontainers.image.version":  s.Version,
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	if s.Description != "" {
		l["org.opencontainers.image.description"] = s.Description
	}
	if s.Source != "" {
		l["org.opencontainers.image.source"] = s.Source
	}
	return l
}

// Build makes the image: no base, one layer with the binary, /etc/passwd
// and /etc/group naming the nonroot user, and a sticky /tmp; for the
// spec's platform (linux/amd64 by default; the binary must be built for
// it). Every time stamp is the Unix epoch, so
// the same binary always makes the same digest.
func Build(s Spec) (v1.Image, error) {
	if s.Name == "" || s.Version == "" {
		return nil, fmt.Errorf("image spec: a name and a version are required")
	}
	bin, err := os.ReadFile(s.Binary)
	if err != nil {
		return nil, fmt.Errorf("read the binary: %w", err)
	}
	layerTar, err := rootfs(s, bin)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		CreatedBy: "make image: " + s.Entrypoint(), Comment: "static binary, no shell",
	}})
	if err != nil {
		return nil, fmt.Errorf("append the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = s.Platform()
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.Entrypoint = []string{s.Entrypoint()}
	cf.Config.Cmd = s.Args
	cf.Config.User = fmt.Sprintf("%d:%d", NonRoot, NonRoot)
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/usr/local/bin"}
	cf.Config.Labels = s.Labels()
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("set the config: %w", err)
	}
	return img, nil
}

// rootfs is the layer's tar: the directories, the user database and the
// binary, owned by root and readable by all, the binary executable.
func rootfs(s Spec, bin []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: epoch, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, body []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRoot, NonRoot)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRoot)
	steps := []func() error{
		func() error { return dir("etc", 0o755) },
		func() error { return file("etc/passwd", 0o644, []byte(passwd)) },
		func() error { return file("etc/group", 0o644, []byte(group)) },
		func() error { return dir("tmp", 0o1777) },
		func() error { return dir("usr", 0o755) },
		func() error { return dir("usr/local", 0o755) },
		func() error { return dir("usr/local/bin", 0o755) },
		func() error { return file(path.Join("usr/local/bin", s.Name), 0o755, bin) },
	}
	names := make([]string, 0, len(s.Also))
	for name := range s.Also {
		names = append(names, name)
	}
	sort.Strings(names) // the same layer, byte for byte, every build
	for _, name := range names {
		steps = append(steps, func() error {
			body, err := os.ReadFile(s.Also[name])
			if err != nil {
				return err
			}
			return file(path.Join("usr/local/bin", name), 0o755, body)
		})
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, fmt.Errorf("layer tar: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer tar: %w", err)
	}
	return buf.Bytes(), nil
}

// RefName is the OCI layout annotation that names an image by its tag.
const RefName = "org.opencontainers.image.ref.name"

// WriteLayout writes img as an OCI image layout in dir (replaced if it
// exists), its manifest annotated with tag, the form `crane push` and
// `skopeo copy oci:` read.
func WriteLayout(dir, tag string, img v1.Image) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clear %s: %w", dir, err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("layout %s: %w", dir, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{RefName: tag})); err != nil {
		return fmt.Errorf("layout %s: %w", dir, err)
	}
	return nil
}

// ReadLayout reads back the one image of a layout WriteLayout wrote, with
// its tag.
func ReadLayout(dir string) (v1.Image, string, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, "", fmt.Errorf("layout %s: %w", dir, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, "", fmt.Errorf("layout %s: %w", dir, err)
	}
	if len(m.Manifests) != 1 {
		return nil, "", fmt.Errorf("layout %s: %d images, want 1", dir, len(m.Manifests))
	}
	d := m.Manifests[0]
	img, err := idx.Image(d.Digest)
	if err != nil {
		return nil, "", fmt.Errorf("layout %s: %w", dir, err)
	}
	return img, d.Annotations[RefName], nil
}

// Extract returns the content of the file at name (no leading slash) in
// img's layers, the topmost wins.
func Extract(img v1.Image, name string) ([]byte, *tar.Header, error) {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, nil, fmt.Errorf("%s is not in the image", name)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read the image: %w", err)
		}
		if path.Clean(h.Name) == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				return nil, nil, fmt.Errorf("read %s: %w", name, err)
			}
			return b, h, nil
		}
	}
}

// Verify reads the layout in dir and checks what a cluster will run: the
// tag, then VerifyImage. It returns the image's compressed size.
func Verify(dir string, s Spec, tag string) (int64, error) {
	img, gotTag, err := ReadLayout(dir)
	if err != nil {
		return 0, err
	}
	if gotTag != tag {
		return 0, fmt.Errorf("%s: tag %q, want %q", dir, gotTag, tag)
	}
	if err := VerifyImage(img, s); err != nil {
		return 0, fmt.Errorf("%s: %w", dir, err)
	}
	return Size(img)
}

// VerifyImage checks one image against its spec: the entrypoint, the
// non-root user, the version label and the platform; then the binary
// inside: on this machine's platform it must answer --version with the
// spec's version (run with no shell, PATH or environment, as the image
// offers), on another its ELF header must name the platform's machine.
func VerifyImage(img v1.Image, s Spec) error {
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	c := cf.Config
	wantOS, wantArch := s.Platform()
	switch {
	case len(c.Entrypoint) != 1 || c.Entrypoint[0] != s.Entrypoint():
		return fmt.Errorf("entrypoint %q, want [%s]", c.Entrypoint, s.Entrypoint())
	case c.User != fmt.Sprintf("%d:%d", NonRoot, NonRoot):
		return fmt.Errorf("user %q, want %d:%d", c.User, NonRoot, NonRoot)
	case c.Labels["org.opencontainers.image.version"] != s.Version:
		return fmt.Errorf("version label %q, want %q", c.Labels["org.opencontainers.image.version"], s.Version)
	case cf.OS != wantOS || cf.Architecture != wantArch:
		return fmt.Errorf("platform %s/%s, want %s/%s", cf.OS, cf.Architecture, wantOS, wantArch)
	}
	bin, h, err := Extract(img, c.Entrypoint[0][1:])
	if err != nil {
		return err
	}
	if h.Mode&0o111 == 0 {
		return fmt.Errorf("%s is not executable (mode %o)", h.Name, h.Mode)
	}
	if wantOS != runtime.GOOS || wantArch != runtime.GOARCH {
		return CheckMachine(bin, wantOS, wantArch)
	}
	tmp, err := os.MkdirTemp("", "ociimage-verify-")
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	defer os.RemoveAll(tmp)
	exe := path.Join(tmp, s.Name)
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	cmd := exec.Command(exe, "--version")
	cmd.Env = []string{}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s --version: %w: %s", s.Entrypoint(), err, out)
	}
	if !strings.Contains(string(out), s.Version) {
		return fmt.Errorf("%s --version printed %q, want it to name %s", s.Entrypoint(), strings.TrimSpace(string(out)), s.Version)
	}
	return nil
}

// CheckMachine checks that bin is an executable for os/arch: an ELF file
// of the architecture's machine for linux, a Mach-O of its CPU for darwin.
func CheckMachine(bin []byte, goos, goarch string) error {
	switch goos {
	case "linux":
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			return fmt.Errorf("not an ELF executable: %w", err)
		}
		want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[goarch]
		if want == 0 || f.Machine != want {
			return fmt.Errorf("ELF machine %s, want %s/%s", f.Machine, goos, goarch)
		}
	case "darwin":
		f, err := macho.NewFile(bytes.NewReader(bin))
		if err != nil {
			return fmt.Errorf("not a Mach-O executable: %w", err)
		}
		want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[goarch]
		if want == 0 || f.Cpu != want {
			return fmt.Errorf("Mach-O CPU %s, want %s/%s", f.Cpu, goos, goarch)
		}
	default:
		return fmt.Errorf("no check for %s/%s", goos, goarch)
	}
	return nil
}

// Index is a multi-platform image: an OCI image index of imgs, each
// described by the platform of its config.
func Index(imgs ...v1.Image) (v1.ImageIndex, error) {
	var adds []mutate.IndexAddendum
	for _, img := range imgs {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			MediaType: types.OCIManifestSchema1,
			Platform:  &v1.Platform{OS: cf.OS, Architecture: cf.Architecture},
		}})
	}
	return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...), nil
}

// WriteIndexLayout writes idx as an OCI image layout in dir (replaced if
// it exists): its index.json names the image index, annotated with tag, the
// form `crane push --index` and `skopeo copy --all oci:` read.
func WriteIndexLayout(dir, tag string, idx v1.ImageIndex) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clear %s: %w", dir, err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("layout %s: %w", dir, err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{RefName: tag})); err != nil {
		return fmt.Errorf("layout %s: %w", dir, err)
	}
	return nil
}

// ReadIndexLayout reads back the image index WriteIndexLayout wrote, with
// its tag.
func ReadIndexLayout(dir string) (v1.ImageIndex, string, error) {
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, "", fmt.Errorf("layout %s: %w", dir, err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, "", fmt.Errorf("layout %s: %w", dir, err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].MediaType != types.OCIImageIndex {
		return nil, "", fmt.Errorf("layout %s: want one image index, have %d entries", dir, len(m.Manifests))
	}
	idx, err := top.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		return nil, "", fmt.Errorf("layout %s: %w", dir, err)
	}
	return idx, m.Manifests[0].Annotations[RefName], nil
}

// Size is the image's compressed size: its manifest, config and layers.
func Size(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, fmt.Errorf("manifest: %w", err)
	}
	n := m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	raw, err := img.RawManifest()
	if err != nil {
		return 0, fmt.Errorf("manifest: %w", err)
	}
	return n + int64(len(raw)), nil
}
