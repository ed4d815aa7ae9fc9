package mariadblocal_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql"

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

// A server started with StartOn also answers on the extra address (the
// node's Pods reach the sites on the bridge's), with the administrative
// account, and still on 127.0.0.1.
func TestAServerStartedOnAnotherAddressAnswersThereAndOnLoopback(t *testing.T) {
	if err := mariadblocal.Available(); err != nil {
		t.Fatal(err)
	}
	port := testenv.FreePort(t)
	s, err := mariadblocal.StartOn(context.Background(), t.TempDir(), "iad", port, 1, "bloodraven", "s3cret", "127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	for _, host := range []string{"127.0.0.1", "127.0.0.2"} {
		db, err := sql.Open("mysql", fmt.Sprintf("bloodraven:s3cret@tcp(%s:%d)/?timeout=2s", host, port))
		if err != nil {
			t.Fatal(err)
		}
		var one int
		err = db.QueryRow("SELECT 1").Scan(&one)
		db.Close()
		if err != nil {
			t.Errorf("%s:%d: %v", host, port, err)
		}
	}
}
