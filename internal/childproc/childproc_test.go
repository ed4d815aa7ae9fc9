package childproc_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shipstream/bloodraven/internal/childproc"
	"github.com/shipstream/bloodraven/internal/mariadblocal"
	"github.com/shipstream/bloodraven/internal/testenv"
)

// envChild makes the test binary the panicking child; its value is a
// directory for MariaDB.
const envChild = "BLOODRAVEN_CHILDPROC_CHILD"

// A test binary that panics while it runs a control plane and a MariaDB
// server takes them down with it: nothing is left running for the next test
// run to trip over (ports, CPU, a data directory in use).
func TestChildrenDieWithAPanickingTestBinary(t *testing.T) {
	if dir := os.Getenv(envChild); dir != "" {
		runPanickingChild(dir)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildrenDieWithAPanickingTestBinary$", "-test.v")
	cmd.Env = append(os.Environ(), envChild+"="+t.TempDir())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var out strings.Builder
	lines := bufio.NewScanner(stdout)
	ready := false
	for lines.Scan() {
		out.WriteString(lines.Text() + "\n")
		if lines.Text() == "ready" {
			ready = true
			break
		}
	}
	if !ready {
		_ = cmd.Wait()
		t.Fatalf("the child did not come up:\n%s%s", out.String(), stderr.String())
	}
	found, err := childproc.Children(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	children := map[int]string{}
	var names []string
	for pid, args := range found {
		children[pid] = filepath.Base(args[0])
		names = append(names, children[pid])
	}
	for _, want := range []string{"kube-apiserver", "etcd", "mariadbd"} {
		if !slices.Contains(names, want) {
			t.Fatalf("children of the test binary: %v; want %s among them", children, want)
		}
	}

	stdin.Close() // the child panics
	go func() {
		for lines.Scan() {
			out.WriteString(lines.Text() + "\n")
		}
	}()
	err = cmd.Wait()
	if err == nil || !strings.Contains(stderr.String()+out.String(), "panic: the test binary panics") {
		t.Fatalf("the child did not panic: %v\n%s%s", err, out.String(), stderr.String())
	}
	died := time.Now()
	deadline := died.Add(10 * time.Second)
	for pid, name := range children {
		for childproc.Running(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("%s (pid %d) still runs 10 s after its parent panicked", name, pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("%d children (%v) gone %v after the test binary panicked", len(children), names, time.Since(died).Round(time.Millisecond))
}

func runPanickingChild(dir string) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		fmt.Println("control plane:", err)
		os.Exit(3)
	}
	_ = env // never stopped: the panic below must take it down
	port, err := freePort()
	if err != nil {
		fmt.Println(err)
		os.Exit(3)
	}
	if _, err := mariadblocal.Start(context.Background(), filepath.Join(dir, "mysql"), "x", port, 1, "u", "p"); err != nil {
		fmt.Println("mariadb:", err)
		os.Exit(3)
	}
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the parent closes stdin
	panic("the test binary panics")
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
