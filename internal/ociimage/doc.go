// Package ociimage builds the operator's and the pipeline CLI's container
// images without Docker or a base image: go-containerregistry's empty image
// plus one layer holding a static binary, the nonroot user's /etc/passwd and
// a sticky /tmp, written as an OCI image layout (`make image`).
//
// It guarantees: the entrypoint is the binary (no shell in the image), the
// user is 65532:65532, the OCI labels carry the version, and every time stamp
// is the Unix epoch, so one binary makes one digest. Verify reads a layout
// back and runs the binary inside with --version.
//
// It does not: build for another platform than linux/amd64, sign images, or
// push them (crane or skopeo do, README "Images").
package ociimage
