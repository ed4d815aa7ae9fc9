// Command bloodraven-deploy is the pipeline's command line on its own: the
// same commands as `bloodraven deploy` (run, status, mark-ddl, completion)
// in a small static binary that links no Kubernetes package, for pipeline
// images and CI runners (linux and darwin, amd64 and arm64).
//
//	go install github.com/shipstream/bloodraven/deployclient/cmd/bloodraven-deploy@latest
package main

import (
	"os"

	"github.com/shipstream/bloodraven/deployclient/deploycmd"
)

// version is stamped by the build (-ldflags -X main.version=...).
var version = "dev"

func main() {
	deploycmd.Version = version
	os.Exit(deploycmd.Run("bloodraven-deploy", os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv))
}
