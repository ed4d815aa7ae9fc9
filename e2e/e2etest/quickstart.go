package e2etest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// QuickstartCommands returns the shell commands of the README's quickstart
// (the sh block between <!-- quickstart --> and <!-- /quickstart -->),
// comments dropped and continuation lines joined.
func QuickstartCommands(t *testing.T, root string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- quickstart -->")
	block, _, ok2 := strings.Cut(rest, "<!-- /quickstart -->")
	if !ok || !ok2 {
		t.Fatal("README.md has no <!-- quickstart --> … <!-- /quickstart --> block")
	}
	var out []string
	cur := ""
	for _, line := range strings.Split(block, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "```") || strings.HasPrefix(line, "#") || (line == "" && cur == "") {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cur += strings.TrimSuffix(line, `\`)
			continue
		}
		cur += line
		out = append(out, strings.Join(strings.Fields(cur), " "))
		cur = ""
	}
	return out
}
