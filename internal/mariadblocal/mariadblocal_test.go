package mariadblocal_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shipstream/bloodraven/internal/mariadblocal"
	"github.com/shipstream/bloodraven/internal/testenv"
)

// Concurrent servers must not share a tmpdir such as /tmp: a starting server
// (mariadb-install-db's bootstrap server included) deletes every #sql* file
// there, including other servers' temporary tables, which failed their
// statements with ERROR 1051.
func TestEveryServerHasItsOwnTmpdir(t *testing.T) {
	if err := mariadblocal.Available(); err != nil {
		t.Fatal(err) // CI installs it; a missing server is a failure, not a skip
	}
	dir := t.TempDir()
	s, err := mariadblocal.Start(context.Background(), dir, "iad", testenv.FreePort(t), 1, "bloodraven", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)

	db, err := s.Root()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var tmpdir string
	if err := db.QueryRow("SELECT @@tmpdir").Scan(&tmpdir); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(s.Dir, tmpdir)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		t.Fatalf("@@tmpdir = %q, want a directory inside the server's own %q", tmpdir, s.Dir)
	}
	fi, err := os.Stat(tmpdir)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: mode %v, want a directory with mode 0700", tmpdir, fi.Mode())
	}
}
