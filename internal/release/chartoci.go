package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// Helm's OCI media types (helm.sh/helm/v3/pkg/registry).
const (
	HelmConfigMediaType = "application/vnd.cncf.helm.config.v1+json"
	HelmChartMediaType  = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
	ociManifestType     = "application/vnd.oci.image.manifest.v1+json"
)

type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// WriteChartLayout writes the packaged chart tgz as an OCI image layout in
// dir, the artifact `helm push` would push: a manifest whose config is the
// chart's Chart.yaml as JSON (Helm's config media type) and whose one
// layer is the package, the manifest annotated with ref (its tag) and the
// chart's version. Written by hand: three blobs, index.json and
// oci-layout.
func WriteChartLayout(dir string, tgz []byte, version, ref string) error {
	meta, err := chartMetadata(tgz)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		return err
	}
	blob := func(b []byte, mediaType string) (ociDescriptor, error) {
		sum := sha256.Sum256(b)
		d := ociDescriptor{MediaType: mediaType, Digest: fmt.Sprintf("sha256:%x", sum), Size: int64(len(b))}
		return d, os.WriteFile(filepath.Join(dir, "blobs", "sha256", fmt.Sprintf("%x", sum)), b, 0o644)
	}
	cfg, err := blob(meta, HelmConfigMediaType)
	if err != nil {
		return err
	}
	layer, err := blob(tgz, HelmChartMediaType)
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": ociManifestType, "config": cfg, "layers": []ociDescriptor{layer},
		"annotations": map[string]string{"org.opencontainers.image.title": "bloodraven", "org.opencontainers.image.version": version},
	})
	if err != nil {
		return err
	}
	md, err := blob(manifest, ociManifestType)
	if err != nil {
		return err
	}
	md.Annotations = map[string]string{"org.opencontainers.image.ref.name": ref}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []ociDescriptor{md}})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), index, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
}

// chartMetadata is the package's Chart.yaml as JSON: what Helm stores as
// the OCI config of a chart.
func chartMetadata(tgz []byte) ([]byte, error) {
	gz, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, fmt.Errorf("chart package: %w", err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("chart package has no Chart.yaml")
		}
		if err != nil {
			return nil, fmt.Errorf("chart package: %w", err)
		}
		if parts := strings.Split(h.Name, "/"); len(parts) == 2 && parts[1] == "Chart.yaml" {
			y, err := io.ReadAll(tr)
			if err != nil {
				return nil, err
			}
			return yaml.YAMLToJSON(y)
		}
	}
}
