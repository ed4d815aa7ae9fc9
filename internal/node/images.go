package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/shipstream/bloodraven/internal/ociimage"
)

// CoreDNSVersion is the CoreDNS module hack/tools/coredns builds.
const CoreDNSVersion = "v1.15.0"

// CoreDNSImage is the cluster DNS image: built here, imported, never
// pulled.
const CoreDNSImage = "localhost/bloodraven-node/coredns:" + CoreDNSVersion

// importImages builds the node's own images (the Pods' pause program and
// CoreDNS, each a static binary in a one-layer image, as make image builds
// the product's) and imports them and Config.Images into containerd's
// k8s.io namespace, where the kubelet finds them: no registry is involved.
func (n *Node) importImages(ctx context.Context) error {
	dir := n.cfg.State("images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("images dir: %w", err)
	}
	own := []struct {
		ref  string
		spec ociimage.Spec
	}{
		{PauseImage, ociimage.Spec{Binary: n.cfg.NodeBin("pause"), Name: "pause", Version: "3.10",
			Description: "the Pods' sandbox process (hack/pause)"}},
		{CoreDNSImage, ociimage.Spec{Binary: n.cfg.NodeBin("coredns"), Name: "coredns", Version: CoreDNSVersion,
			Description: "CoreDNS " + CoreDNSVersion + " (hack/tools/coredns: the plugins the node uses)",
			Args:        []string{"-conf", "/etc/coredns/Corefile"}}},
	}
	var tarballs []string
	for _, o := range own {
		img, err := ociimage.Build(o.spec)
		if err != nil {
			return fmt.Errorf("image %s: %w", o.ref, err)
		}
		ref, err := name.ParseReference(o.ref)
		if err != nil {
			return fmt.Errorf("image %s: %w", o.ref, err)
		}
		path := filepath.Join(dir, o.spec.Name+".tar")
		if err := tarball.WriteToFile(path, ref, img); err != nil {
			return fmt.Errorf("image %s: %w", o.ref, err)
		}
		tarballs = append(tarballs, path)
	}
	for _, im := range n.cfg.Images {
		tarballs = append(tarballs, im.Tarball)
	}
	for _, t := range tarballs {
		if _, err := n.ctr(ctx, "images", "import", "--snapshotter=overlayfs", t); err != nil {
			return err
		}
	}
	for _, im := range n.cfg.Images {
		for from, to := range im.Tags {
			if _, err := n.ctr(ctx, "images", "tag", "--force", from, to); err != nil {
				return err
			}
		}
	}
	return nil
}

// ImportImage imports a docker-archive tarball into the running node.
func (n *Node) ImportImage(ctx context.Context, tarballPath string) error {
	_, err := n.ctr(ctx, "images", "import", "--snapshotter=overlayfs", tarballPath)
	return err
}
