package release

import (
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// KrewArchive is one platform's archive of the plugin.
type KrewArchive struct {
	Platform Platform
	// Name is the archive's file name, which the base URL is joined with.
	Name   string
	SHA256 string
}

type krewPlugin struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   krewMetadata   `json:"metadata"`
	Spec       krewPluginSpec `json:"spec"`
}

type krewMetadata struct {
	Name string `json:"name"`
}

type krewPluginSpec struct {
	Version          string         `json:"version"`
	Homepage         string         `json:"homepage"`
	ShortDescription string         `json:"shortDescription"`
	Description      string         `json:"description"`
	Caveats          string         `json:"caveats"`
	Platforms        []krewPlatform `json:"platforms"`
}

type krewPlatform struct {
	Selector krewSelector `json:"selector"`
	URI      string       `json:"uri"`
	SHA256   string       `json:"sha256"`
	Bin      string       `json:"bin"`
	Files    []krewFile   `json:"files"`
}

type krewSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

type krewFile struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// KrewManifest is the krew plugin manifest (krew.googlecontainertools.
// github.com/v1alpha2 Plugin) of kubectl-bloodraven version: one platform
// per archive, its URI baseURL joined with the archive's name, its sha256
// the archive's. The plugin's archive holds the binary, the completion
// shim and LICENSE, all installed; krew links only the binary onto PATH,
// so the caveats say how to give kubectl the shim.
func KrewManifest(version, baseURL string, archives []KrewArchive) ([]byte, error) {
	if len(archives) == 0 {
		return nil, fmt.Errorf("krew manifest: no archive")
	}
	m := krewPlugin{APIVersion: "krew.googlecontainertools.github.com/v1alpha2", Kind: "Plugin", Metadata: krewMetadata{Name: "bloodraven"},
		Spec: krewPluginSpec{
			Version:          "v" + strings.TrimPrefix(version, "v"),
			Homepage:         source,
			ShortDescription: "Look at and act on Bloodraven's MySQL failover groups",
			Description: "For the people on call: a group's primary, topology generation, planned operation and who holds its\n" +
				"deployment leases; revoke them, request a planned failover, or open a database's schema-verification gate.\n",
			Caveats: "krew puts only kubectl-bloodraven on PATH. For `kubectl bloodraven <TAB>` (kubectl 1.26+), put the\n" +
				"completion shim there too:\n" +
				"  ln -s \"${KREW_ROOT:-$HOME/.krew}/store/bloodraven/v" + strings.TrimPrefix(version, "v") + "/kubectl_complete-bloodraven\" \"${KREW_ROOT:-$HOME/.krew}/bin/\"\n",
		}}
	for _, a := range archives {
		if len(a.SHA256) != 64 {
			return nil, fmt.Errorf("krew manifest: %s: sha256 %q", a.Name, a.SHA256)
		}
		m.Spec.Platforms = append(m.Spec.Platforms, krewPlatform{
			Selector: krewSelector{MatchLabels: map[string]string{"os": a.Platform.OS, "arch": a.Platform.Arch}},
			URI:      strings.TrimSuffix(baseURL, "/") + "/" + a.Name,
			SHA256:   a.SHA256,
			Bin:      "kubectl-bloodraven",
			Files: []krewFile{{From: "kubectl-bloodraven", To: "."}, {From: "kubectl_complete-bloodraven", To: "."},
				{From: "LICENSE", To: "."}},
		})
	}
	return yaml.Marshal(m)
}
