// Command mkimage writes an OCI image layout holding one static binary
// (internal/ociimage) and verifies it: `make image` runs it for the
// operator and for bloodraven-deploy.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/shipstream/bloodraven/internal/ociimage"
)

func main() {
	var s ociimage.Spec
	var out, tag, tarPath, args string
	flag.StringVar(&s.Binary, "binary", "", "the static linux/amd64 binary")
	flag.StringVar(&s.Name, "name", "", "its name in the image (/usr/local/bin/NAME) and the image's title")
	flag.StringVar(&s.Version, "version", "", "the org.opencontainers.image.version label; the binary's --version must name it")
	flag.StringVar(&s.Description, "description", "", "the description label")
	flag.StringVar(&s.Source, "source", "", "the source label")
	flag.StringVar(&args, "args", "", "default arguments (the image's Cmd), comma-separated")
	flag.StringVar(&out, "out", "", "the OCI layout directory to write (replaced)")
	flag.StringVar(&tag, "tag", "", "the image reference, e.g. ghcr.io/shipstream/bloodraven:0.2.0")
	flag.StringVar(&tarPath, "tarball", "", "also write a docker-load tarball here")
	flag.Parse()
	if args != "" {
		s.Args = strings.Split(args, ",")
	}
	if err := run(s, out, tag, tarPath); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(s ociimage.Spec, out, tag, tarPath string) error {
	if out == "" || tag == "" {
		return fmt.Errorf("-out and -tag are required")
	}
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("-tag: %w", err)
	}
	img, err := ociimage.Build(s)
	if err != nil {
		return err
	}
	if err := ociimage.WriteLayout(out, tag, img); err != nil {
		return err
	}
	if tarPath != "" {
		if err := tarball.WriteToFile(tarPath, ref, img); err != nil {
			return fmt.Errorf("tarball: %w", err)
		}
	}
	size, err := ociimage.Verify(out, s, tag)
	if err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return fmt.Errorf("digest: %w", err)
	}
	fmt.Printf("%s: %s %s, %.1f MiB compressed, verified (entrypoint %s, user %d, --version names %s)\n",
		out, tag, d, float64(size)/(1<<20), s.Entrypoint(), ociimage.NonRoot, s.Version)
	return nil
}
