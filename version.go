// Package bloodraven holds what the module's root owns: the release number
// in the file VERSION, which the Makefile, the chart and the binaries read.
package bloodraven

import (
	_ "embed"
	"runtime/debug"
	"strings"
)

//go:embed VERSION
var release string

// Release is the release in the file VERSION (for example "0.2.0"), without
// the commit: the version of a binary built without make's -ldflags.
func Release() string { return strings.TrimSpace(release) }

// Version is a binary's version: stamped when the build set it (make's
// -ldflags "-X main.version=..."), otherwise Release and the commit the Go
// toolchain recorded ("0.2.0+0123456789ab", "-dirty" when the tree was).
func Version(stamped string) string {
	if stamped != "" {
		return stamped
	}
	v := Release()
	if info, ok := debug.ReadBuildInfo(); ok {
		var rev, dirty string
		for _, s := range info.Settings {
			switch {
			case s.Key == "vcs.revision" && len(s.Value) >= 12:
				rev = s.Value[:12]
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = "-dirty"
			}
		}
		if rev != "" {
			v += "+" + rev + dirty
		}
	}
	return v
}
