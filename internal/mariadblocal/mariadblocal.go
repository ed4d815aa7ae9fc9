// Package mariadblocal starts throw-away MariaDB servers on loopback for the
// topology driver's integration tests and for the playground's sites. Each
// server has its own data directory, binary log with GTIDs (strict mode), and
// an administrative account the driver uses. It is not a way to run MariaDB
// in production.
package mariadblocal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	// MySQL protocol driver for database/sql.
	_ "github.com/go-sql-driver/mysql"
	"github.com/shipstream/bloodraven/internal/childproc"
)

// Binaries the package needs, from Debian's mariadb-server.
const (
	Mariadbd  = "mariadbd"
	InstallDB = "mariadb-install-db"
)

// ErrNotInstalled means mariadbd is not on this machine.
var ErrNotInstalled = errors.New("mariadbd is not installed: run `apt-get install -y mariadb-server` (make dev and .ci/run do it for you)")

// Available reports whether the MariaDB binaries are installed.
func Available() error {
	for _, b := range []string{Mariadbd, InstallDB} {
		if _, err := lookPath(b); err != nil {
			return ErrNotInstalled
		}
	}
	return nil
}

func lookPath(b string) (string, error) {
	if p, err := exec.LookPath(b); err == nil {
		return p, nil
	}
	p := filepath.Join("/usr/sbin", b)
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s not found", b)
}

// Server is one local MariaDB server.
type Server struct {
	Name     string
	Port     int
	ServerID int
	Dir      string
	User     string
	Password string
	// Bind are the addresses it listens on besides 127.0.0.1 (StartOn).
	Bind []string
	// TLS, when set, is what the server offers TLS with (StartWith);
	// nil: the server offers no TLS at all (have_ssl DISABLED).
	TLS    *ServerTLS
	cmd    *exec.Cmd
	exited chan struct{}
}

// Start initializes dir (if empty) and starts a server listening on
// 127.0.0.1:port with the administrative account user/password.
func Start(ctx context.Context, dir, name string, port, serverID int, user, password string) (*Server, error) {
	return StartOn(ctx, dir, name, port, serverID, user, password)
}

// StartOn is Start with the server also listening on the addresses bind
// (e.g. the node's bridge address, which its Pods reach), on the same port.
func StartOn(ctx context.Context, dir, name string, port, serverID int, user, password string, bind ...string) (*Server, error) {
	return StartWith(ctx, dir, name, port, serverID, user, password, Options{Bind: bind})
}

// ServerTLS is the PEM a server offers TLS with.
type ServerTLS struct {
	// CA verifies client certificates (REQUIRE X509 accounts).
	CA []byte
	// Cert and Key are the server's certificate and key.
	Cert, Key []byte
}

// Options are StartWith's.
type Options struct {
	// Bind: addresses to listen on besides 127.0.0.1.
	Bind []string
	// TLS, when set, makes the server offer TLS (connections may still be
	// plaintext unless an account requires SSL).
	TLS *ServerTLS
}

// StartWith is Start with options.
func StartWith(ctx context.Context, dir, name string, port, serverID int, user, password string, o Options) (*Server, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	s := &Server{Name: name, Port: port, ServerID: serverID, Dir: dir, User: user, Password: password, Bind: o.Bind, TLS: o.TLS}
	data := filepath.Join(dir, "data")
	fresh := false
	if _, err := os.Stat(filepath.Join(data, "mysql")); err != nil {
		fresh = true
		if err := os.MkdirAll(data, 0o700); err != nil {
			return nil, err
		}
		if err := s.makeTmpdir(); err != nil {
			return nil, err
		}
		// mariadb-install-db passes options it does not know, such as
		// --tmpdir, on to the mariadbd it bootstraps with.
		installDB, _ := lookPath(InstallDB)
		out, err := exec.CommandContext(ctx, installDB, "--no-defaults", "--datadir="+data, "--tmpdir="+s.Tmpdir(), "--user=root",
			"--auth-root-authentication-method=normal", "--skip-test-db").CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("mariadb-install-db for %s: %w\n%s", name, err, out)
		}
	}
	if err := s.start(); err != nil {
		return nil, err
	}
	if fresh {
		if err := s.createAccount(ctx); err != nil {
			s.Kill()
			return nil, err
		}
	}
	return s, nil
}

func (s *Server) start() error {
	mariadbd, _ := lookPath(Mariadbd)
	if err := s.makeTmpdir(); err != nil {
		return err
	}
	tlsArgs, err := s.writeTLS()
	if err != nil {
		return err
	}
	log, err := os.OpenFile(filepath.Join(s.Dir, "mariadbd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	s.cmd = exec.Command(mariadbd, append([]string{"--no-defaults",
		"--datadir=" + filepath.Join(s.Dir, "data"), "--tmpdir=" + s.Tmpdir(),
		"--socket=" + s.Socket(),
		"--pid-file=" + filepath.Join(s.Dir, "mariadbd.pid"),
		"--port=" + strconv.Itoa(s.Port), "--bind-address=" + strings.Join(append([]string{"127.0.0.1"}, s.Bind...), ","),
		"--server-id=" + strconv.Itoa(s.ServerID),
		"--log-bin=" + filepath.Join(s.Dir, "data", "binlog"), "--log-slave-updates", "--binlog-format=ROW",
		"--gtid-strict-mode=1", "--skip-name-resolve", "--user=root",
		"--innodb-buffer-pool-size=16M", "--innodb-log-file-size=16M", "--performance-schema=OFF",
		"--skip-slave-start", "--max-connections=200"}, tlsArgs...)...)
	s.cmd.Stdout, s.cmd.Stderr = log, log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := childproc.Do(s.cmd.Start); err != nil {
		log.Close()
		return fmt.Errorf("start mariadbd %s: %w", s.Name, err)
	}
	s.exited = make(chan struct{})
	go func() { _ = s.cmd.Wait(); log.Close(); close(s.exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if c, err := net(s.Socket()); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-s.exited:
			b, _ := os.ReadFile(filepath.Join(s.Dir, "mariadbd.log"))
			return fmt.Errorf("mariadbd %s exited during start-up:\n%s", s.Name, tailBytes(b, 2000))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mariadbd %s not ready after 60s", s.Name)
		}
	}
}

// writeTLS writes the server's TLS files into its directory and returns
// mariadbd's options for them; none without TLS.
func (s *Server) writeTLS() ([]string, error) {
	if s.TLS == nil {
		// MariaDB 11.4+ would otherwise offer TLS with a certificate it
		// makes itself.
		return []string{"--skip-ssl"}, nil
	}
	dir := filepath.Join(s.Dir, "tls")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	files := []struct {
		opt, name string
		pem       []byte
	}{{"--ssl-ca", "ca.pem", s.TLS.CA}, {"--ssl-cert", "server.pem", s.TLS.Cert}, {"--ssl-key", "server-key.pem", s.TLS.Key}}
	var args []string
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, f.pem, 0o600); err != nil {
			return nil, fmt.Errorf("TLS files of %s: %w", s.Name, err)
		}
		args = append(args, f.opt+"="+p)
	}
	return args, nil
}

func net(socket string) (*sql.DB, error) {
	db, err := sql.Open("mysql", "root@unix("+socket+")/?timeout=1s")
	if err != nil {
		return nil, err
	}
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// Tmpdir is the server's own directory for temporary files. Servers must not
// share one (such as /tmp): a starting server deletes every #sql* file in its
// tmpdir, including the temporary tables of the other servers.
func (s *Server) Tmpdir() string { return filepath.Join(s.Dir, "tmp") }

func (s *Server) makeTmpdir() error {
	if err := os.MkdirAll(s.Tmpdir(), 0o700); err != nil {
		return fmt.Errorf("tmpdir of %s: %w", s.Name, err)
	}
	return nil
}

// Socket is the server's unix socket (root can log in there without a
// password).
func (s *Server) Socket() string { return filepath.Join(s.Dir, "mariadbd.sock") }

// Root opens a root connection over the socket.
func (s *Server) Root() (*sql.DB, error) { return net(s.Socket()) }

// DSN is the go-sql-driver DSN of the administrative account over TCP.
func (s *Server) DSN(database string) string {
	return fmt.Sprintf("%s:%s@tcp(127.0.0.1:%d)/%s?timeout=2s&readTimeout=10s&writeTimeout=10s", s.User, s.Password, s.Port, database)
}

// createAccount creates the administrative account without writing the
// binary log, so every server starts with an empty GTID history.
func (s *Server) createAccount(ctx context.Context) error {
	db, err := s.Root()
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, q := range []string{
		"SET SESSION sql_log_bin=0",
		fmt.Sprintf("CREATE USER IF NOT EXISTS '%s'@'%%' IDENTIFIED BY '%s'", s.User, s.Password),
		fmt.Sprintf("GRANT ALL PRIVILEGES ON *.* TO '%s'@'%%' WITH GRANT OPTION", s.User),
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("account on %s: %s: %w", s.Name, q, err)
		}
	}
	return nil
}

// ReplicateFrom makes s a read-only GTID replica of primary.
func (s *Server) ReplicateFrom(ctx context.Context, primary *Server) error {
	db, err := s.Root()
	if err != nil {
		return err
	}
	defer db.Close()
	for _, q := range []string{
		"SET GLOBAL read_only=ON",
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='%s', MASTER_PASSWORD='%s', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1",
			primary.Port, primary.User, primary.Password),
		"START SLAVE",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("replication %s <- %s: %w", s.Name, primary.Name, err)
		}
	}
	return nil
}

// Kill stops the server with SIGKILL, as a crash would.
func (s *Server) Kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// Pause stops the server's process with SIGSTOP: it keeps its sockets, the
// kernel accepts connections for it, and it answers nothing, as a hung or
// partitioned host does.
func (s *Server) Pause() error {
	if s.cmd == nil || s.cmd.Process == nil {
		return fmt.Errorf("mariadbd %s is not running", s.Name)
	}
	// Returns once every thread is stopped: kill(2) alone returns before
	// that, and a loaded machine let a "paused" server answer for seconds.
	return childproc.Stop(s.cmd.Process.Pid, 10*time.Second)
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error {
	if s.cmd == nil || s.cmd.Process == nil {
		return fmt.Errorf("mariadbd %s is not running", s.Name)
	}
	return s.cmd.Process.Signal(syscall.SIGCONT)
}

// Stop shuts the server down with SIGTERM.
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(30 * time.Second):
			s.Kill()
		}
	}
}

// Restart starts a stopped or killed server again on the same data.
func (s *Server) Restart() error { return s.start() }

func tailBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
