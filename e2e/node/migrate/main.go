// Command migrate is the node suite's stand-in for a migration tool: the
// README's Job runs `bloodraven-deploy run … -- migrate up`, and the suite
// builds that Job's image from this and bloodraven-deploy. It changes
// nothing: it prints what it was asked and exits 0, which is what the
// coordination around it (the mutex, the hold, the DeployRun) needs.
package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	fmt.Printf("migrate %s: nothing to apply (the node suite's stand-in for a migration tool)\n", strings.Join(os.Args[1:], " "))
}
