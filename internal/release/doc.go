// Package release builds what `make release` writes into dist/, from a
// clean tree, with nothing downloaded prebuilt:
//
//   - the operator's and bloodraven-deploy's images, each one OCI image
//     index for linux/amd64 and linux/arm64 (the arm64 binaries
//     cross-compiled, CGO off) in an OCI image layout, oci/<name>/;
//   - a CycloneDX SBOM per image, <name>.cdx.json beside its layout, listing
//     every Go module linked into the image's binaries (read from their
//     build information: the module graph as the linker used it);
//   - the chart as `helm package` makes it, with a Helm repository
//     index.yaml whose URL is the release base URL, and as an OCI artifact
//     layout (oci/chart-bloodraven/, Helm's media types: `oras cp
//     --from-oci-layout` or `crane push` publishes it);
//   - bloodraven-deploy and kubectl-bloodraven archives for each CLI
//     platform (linux and darwin, amd64 and arm64), the plugin's with its
//     completion shim, each with LICENSE;
//   - SHA256SUMS of every top-level file;
//   - bloodraven.yaml, a krew plugin manifest whose URIs are the
//     release base URL and the archives' names, with their checksums;
//   - RELEASE-NOTES.md, the CHANGELOG section of the version.
//
// Archives and SBOMs carry the commit's time as every time stamp and
// images the Unix epoch, so the same commit and toolchain build the same
// archives, images and SBOMs (index.yaml's "generated" and the chart
// package's times are Helm's and are not). The release's readers are in its tests: they open
// dist/ with other code than wrote it (go-containerregistry's layout
// reader, archive/tar, go list for the module graph, helm install).
//
// What it does not do: publish. Pushing the layouts, uploading the assets
// and tagging (vX.Y.Z and deployclient/vX.Y.Z) are the release
// manager's (docs/release.md).
package release
