// Package bloodraven holds what the module's root owns: the release number
// in the file VERSION, which the Makefile, the chart and the binaries read.
package bloodraven

import (
	_ "embed"
	"strings"
)

//go:embed VERSION
var release string

// Release is the release in the file VERSION (for example "0.2.0"), without
// the commit: the version of a binary built without make's -ldflags.
func Release() string { return strings.TrimSpace(release) }
