package release

import (
	"fmt"
	"os"
	"strings"
)

// Notes is the release notes of version: the CHANGELOG.md section whose
// heading is "## VERSION" (anything may follow, such as its date), without
// that heading, under a title naming the release. A CHANGELOG without the
// section is an error: a release says what changed.
func Notes(changelog, version string) (string, error) {
	notes, _, err := notesOf(changelog, version)
	return notes, err
}

// notesOf is Notes and whether the section's heading says "unreleased".
func notesOf(changelog, version string) (_ string, unreleased bool, _ error) {
	b, err := os.ReadFile(changelog)
	if err != nil {
		return "", false, err
	}
	var body []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			if in {
				break
			}
			f := strings.Fields(line)
			in = len(f) >= 2 && (f[1] == version || f[1] == "v"+version)
			if in {
				unreleased = strings.Contains(strings.ToLower(line), "unreleased")
			}
			continue
		}
		if in {
			body = append(body, line)
		}
	}
	text := strings.TrimSpace(strings.Join(body, "\n"))
	if text == "" {
		return "", false, fmt.Errorf("%s has no section \"## %s\" (or it is empty): write the release's changes there first", changelog, version)
	}
	return fmt.Sprintf("# Bloodraven %s\n\n%s\n\nUpgrading: docs/upgrading.md. Verifying the assets: docs/release.md.\n", version, text), unreleased, nil
}
