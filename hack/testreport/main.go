// Command testreport runs `go test -json ...` and prints what plain
// `go test` prints (a line per package, the output of failed tests only),
// then the slowest tests and packages of the run and its wall time; -out
// writes every timing as JSON. It exits with the command's status, so a
// failed test fails the caller.
//
//	go run ./hack/testreport -slowest 20 -out bin/test-times.json -- go test -json -race ./...
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"
)

// event is one line of test2json (go doc test2json).
type event struct {
	Time    time.Time `json:"Time"`
	Action  string    `json:"Action"`
	Package string    `json:"Package"`
	Test    string    `json:"Test"`
	Elapsed float64   `json:"Elapsed"`
	Output  string    `json:"Output"`
}

// Timing is one test's or package's wall time.
type Timing struct {
	Package string  `json:"package"`
	Test    string  `json:"test,omitempty"`
	Seconds float64 `json:"seconds"`
	Result  string  `json:"result"`
}

func main() {
	slowest := flag.Int("slowest", 20, "how many of the slowest tests and packages to print")
	out := flag.String("out", "", "write every top-level test's and package's timing here (JSON), appended to what the file holds")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: testreport [-slowest N] [-out FILE] -- go test -json ...")
		os.Exit(2)
	}
	cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	timings := report(stdout, os.Stdout)
	status := 0
	if err := cmd.Wait(); err != nil {
		status = 1
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() > 0 {
			status = ee.ExitCode()
		}
	}
	printSlowest(os.Stdout, timings, *slowest)
	// The whole command, its builds included: the phase's share of a run.
	fmt.Printf("\nthis go test took %.0f s (wall, builds included)\n", time.Since(start).Seconds())
	if *out != "" {
		if err := appendJSON(*out, timings); err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			status = max(status, 1)
		}
	}
	os.Exit(status)
}

// report copies r's events to w as plain `go test` would print them and
// returns the timings of top-level tests and packages.
func report(r io.Reader, w io.Writer) []Timing {
	buffered := map[string][]string{} // package + "\x00" + test -> output
	var timings []Timing
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			fmt.Fprintln(w, string(line)) // not an event: the build's own output
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch {
		case e.Action == "build-output":
			fmt.Fprint(w, e.Output)
		case e.Test == "" && e.Action == "output":
			if e.Output != "PASS\n" {
				fmt.Fprint(w, e.Output)
			}
		case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
			timings = append(timings, Timing{Package: e.Package, Seconds: e.Elapsed, Result: e.Action})
		case e.Action == "output":
			// A subtest's output belongs to its top-level test too: a
			// failed subtest fails its parent, which prints it all.
			top := e.Package + "\x00" + topLevel(e.Test)
			buffered[top] = append(buffered[top], e.Output)
		case e.Action == "fail" && !strings.Contains(e.Test, "/"):
			for _, o := range buffered[key] {
				fmt.Fprint(w, o)
			}
			delete(buffered, key)
			timings = append(timings, Timing{Package: e.Package, Test: e.Test, Seconds: e.Elapsed, Result: e.Action})
		case (e.Action == "pass" || e.Action == "skip") && !strings.Contains(e.Test, "/"):
			delete(buffered, key)
			timings = append(timings, Timing{Package: e.Package, Test: e.Test, Seconds: e.Elapsed, Result: e.Action})
		}
	}
	// A test still running when its binary died (a timeout's panic, a
	// crash): its output is all there is to read.
	keys := make([]string, 0, len(buffered))
	for k := range buffered {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		pkg, test, _ := strings.Cut(k, "\x00")
		fmt.Fprintf(w, "--- %s %s did not finish; its output:\n", pkg, test)
		for _, o := range buffered[k] {
			fmt.Fprint(w, o)
		}
	}
	return timings
}

func topLevel(test string) string {
	name, _, _ := strings.Cut(test, "/")
	return name
}

func printSlowest(w io.Writer, timings []Timing, n int) {
	if n <= 0 || len(timings) == 0 {
		return
	}
	var tests, pkgs []Timing
	for _, t := range timings {
		if t.Test == "" {
			pkgs = append(pkgs, t)
		} else {
			tests = append(tests, t)
		}
	}
	for _, part := range []struct {
		name string
		ts   []Timing
	}{{"tests", tests}, {"packages", pkgs}} {
		sort.SliceStable(part.ts, func(i, j int) bool { return part.ts[i].Seconds > part.ts[j].Seconds })
		fmt.Fprintf(w, "\nslowest %s of this run:\n", part.name)
		for i, t := range part.ts {
			if i == n {
				break
			}
			name := t.Package
			if t.Test != "" {
				name = t.Package + " " + t.Test
			}
			fmt.Fprintf(w, "%8.1fs  %-4s  %s\n", t.Seconds, t.Result, name)
		}
	}
}

func appendJSON(path string, timings []Timing) error {
	var all []Timing
	if data, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(data, &all)
	}
	all = append(all, timings...)
	data, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
