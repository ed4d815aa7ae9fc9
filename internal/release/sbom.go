package release

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"runtime/debug"
	"sort"
	"strings"
	"time"
)

// SBOMSubject is what an SBOM describes: an image index.
type SBOMSubject struct {
	// Name is the image's repository (ghcr.io/shipstream/bloodraven).
	Name, Version string
	// Digest is the image index's digest (sha256:…).
	Digest string
}

// CycloneDX 1.5, the fields this SBOM fills.
type cdxBOM struct {
	BOMFormat    string          `json:"bomFormat"`
	SpecVersion  string          `json:"specVersion"`
	SerialNumber string          `json:"serialNumber"`
	Version      int             `json:"version"`
	Metadata     cdxMetadata     `json:"metadata"`
	Components   []cdxComponent  `json:"components"`
	Dependencies []cdxDependency `json:"dependencies"`
}

type cdxMetadata struct {
	Timestamp string       `json:"timestamp"`
	Tools     cdxTools     `json:"tools"`
	Component cdxComponent `json:"component"`
}

type cdxTools struct {
	Components []cdxComponent `json:"components"`
}

type cdxComponent struct {
	Type       string        `json:"type"`
	BOMRef     string        `json:"bom-ref,omitempty"`
	Name       string        `json:"name"`
	Version    string        `json:"version,omitempty"`
	PURL       string        `json:"purl,omitempty"`
	Properties []cdxProperty `json:"properties,omitempty"`
}

type cdxProperty struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type cdxDependency struct {
	Ref       string   `json:"ref"`
	DependsOn []string `json:"dependsOn"`
}

// SBOM is a CycloneDX 1.5 JSON document for subject: a component for every
// Go module linked into any of bins (their build information, which the Go
// linker writes: the module graph as the build resolved it, replacements
// applied), each with its module sum, and the Go toolchain. Dependencies
// are flat: the image depends on every module, since the build information
// records which modules were linked, not who required whom.
func SBOM(subject SBOMSubject, stamp time.Time, bins ...string) ([]byte, error) {
	mods := map[string]debug.Module{}
	var goVersion string
	for _, bin := range bins {
		info, err := buildinfo.ReadFile(bin)
		if err != nil {
			return nil, fmt.Errorf("build information of %s: %w", bin, err)
		}
		goVersion = info.GoVersion
		for _, m := range append([]*debug.Module{&info.Main}, info.Deps...) {
			if m.Path == "" {
				continue
			}
			mod := *m
			if r := m.Replace; r != nil {
				mod.Version, mod.Sum = r.Version, r.Sum
			}
			// This repository's own modules (the main module, which the
			// toolchain stamps with a pseudo-version from git, and the
			// client module replaced by its directory) are at the release's
			// version.
			if strings.HasPrefix(mod.Path, ownModule) {
				mod.Version, mod.Sum = "v"+subject.Version, ""
			}
			mods[mod.Path+"@"+mod.Version] = mod
		}
	}
	keys := make([]string, 0, len(mods))
	for k := range mods {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	rootRef := "pkg:oci/" + path.Base(subject.Name) + "@" + subject.Digest + "?repository_url=" + url.QueryEscape(subject.Name)
	bom := cdxBOM{BOMFormat: "CycloneDX", SpecVersion: "1.5", Version: 1,
		SerialNumber: "urn:uuid:" + uuidFrom(subject.Digest),
		Metadata: cdxMetadata{
			Timestamp: stamp.UTC().Format(time.RFC3339),
			Tools:     cdxTools{Components: []cdxComponent{{Type: "application", Name: "bloodraven internal/release", Version: subject.Version}}},
			Component: cdxComponent{Type: "container", BOMRef: rootRef, Name: subject.Name, Version: subject.Version, PURL: rootRef},
		},
		Components: []cdxComponent{},
	}
	dep := cdxDependency{Ref: rootRef, DependsOn: []string{}}
	for _, k := range keys {
		m := mods[k]
		purl := "pkg:golang/" + m.Path + "@" + m.Version
		c := cdxComponent{Type: "library", BOMRef: purl, Name: m.Path, Version: m.Version, PURL: purl}
		if m.Sum != "" {
			c.Properties = []cdxProperty{{Name: "go:module:sum", Value: m.Sum}}
		}
		bom.Components = append(bom.Components, c)
		dep.DependsOn = append(dep.DependsOn, purl)
	}
	if goVersion != "" {
		purl := "pkg:golang/stdlib@" + goVersion
		bom.Components = append(bom.Components, cdxComponent{Type: "library", BOMRef: purl, Name: "stdlib", Version: goVersion, PURL: purl})
		dep.DependsOn = append(dep.DependsOn, purl)
	}
	bom.Dependencies = []cdxDependency{dep}
	return json.MarshalIndent(bom, "", "  ")
}

// ownModule is this repository's module path, the client's its prefix.
const ownModule = "github.com/shipstream/bloodraven"

// uuidFrom is a version-5-shaped UUID derived from s: the same image, the
// same serial number.
func uuidFrom(s string) string {
	h := sha256.Sum256([]byte(s))
	h[6] = (h[6] & 0x0f) | 0x50
	h[8] = (h[8] & 0x3f) | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}
