// Command release writes a release into dist/ (package internal/release):
// `make release` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/shipstream/bloodraven/internal/release"
)

func main() {
	o := release.Options{Log: os.Stdout}
	var images, clis string
	flag.StringVar(&o.Root, "root", ".", "the repository's root")
	flag.StringVar(&o.Out, "out", "dist", "the directory to write (replaced)")
	flag.StringVar(&o.Version, "version", "", "the release (file VERSION)")
	flag.StringVar(&o.BinaryVersion, "binary-version", "", "what the binaries' --version prints (default: -version)")
	flag.StringVar(&o.BaseURL, "base-url", "", "where the assets will be downloaded from (krew and index.yaml URLs)")
	flag.StringVar(&o.Registry, "registry", "", "the images' repository prefix, e.g. ghcr.io/shipstream")
	flag.StringVar(&o.Helm, "helm", "helm", "the helm binary")
	flag.StringVar(&images, "image-platforms", "linux/amd64,linux/arm64", "the images' platforms")
	flag.StringVar(&clis, "cli-platforms", "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64", "the CLI archives' platforms")
	flag.BoolVar(&o.AllowDirty, "allow-dirty", false, "build from a tree with uncommitted changes (a trial, never a release)")
	flag.Parse()
	var err error
	if o.ImagePlatforms, err = release.ParsePlatforms(images); err == nil {
		o.CLIPlatforms, err = release.ParsePlatforms(clis)
	}
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		_, err = release.Build(ctx, o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}
