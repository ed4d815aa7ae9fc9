package release

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"net/url"
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
	type mod struct{ path, version, sum string }
	mods := map[string]mod{}
	var goVersion string
	for _, bin := range bins {
		info, err := buildinfo.ReadFile(bin)
		if err != nil {
			return nil, fmt.Errorf("build information of %s: %w", bin, err)
		}
		goVersion = info.GoVersion
		all := []*debugModule{{info.Main.Path, info.Main.Version, info.Main.Sum}}
		for _, d := range info.Deps {
			m := &debugModule{d.Path, d.Version, d.Sum}
			if r := d.Replace; r != nil {
				m.version, m.sum = r.Version, r.Sum
				if m.version == "" { // a local replacement: the tree's own module
					m.version = "(devel)"
				}
			}
			all = append(all, m)
		}
		for _, m := range all {
			if m.path == "" {
				continue
			}
			// This release's own modules (the main module, stamped by the
			// toolchain with a pseudo-version from git, and the client
			// module replaced by its directory) are at the release's
			// version.
			if m == all[0] || m.version == "(devel)" || m.version == "" || strings.HasPrefix(m.path, "github.com/shipstream/bloodraven") {
				m.version, m.sum = "v"+subject.Version, ""
			}
			mods[m.path+"@"+m.version] = mod{m.path, m.version, m.sum}
		}
	}
	keys := make([]string, 0, len(mods))
	for k := range mods {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	rootRef := "pkg:oci/" + lastSegment(subject.Name) + "@" + subject.Digest + "?repository_url=" + url.QueryEscape(subject.Name)
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
		purl := "pkg:golang/" + m.path + "@" + m.version
		c := cdxComponent{Type: "library", BOMRef: purl, Name: m.path, Version: m.version, PURL: purl}
		if m.sum != "" {
			c.Properties = []cdxProperty{{Name: "go:module:sum", Value: m.sum}}
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

type debugModule struct{ path, version, sum string }

func lastSegment(repo string) string {
	for i := len(repo) - 1; i >= 0; i-- {
		if repo[i] == '/' {
			return repo[i+1:]
		}
	}
	return repo
}

// uuidFrom is a version-5-shaped UUID derived from s: the same image, the
// same serial number.
func uuidFrom(s string) string {
	h := sha256.Sum256([]byte(s))
	h[6] = (h[6] & 0x0f) | 0x50
	h[8] = (h[8] & 0x3f) | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}
