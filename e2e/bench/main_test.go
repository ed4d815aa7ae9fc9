package bench

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shipstream/bloodraven/internal/testenv"
)

// env is the control plane; nil unless BLOODRAVEN_BENCH is set.
var env *testenv.Env

// TestMain starts a control plane only when the load generator is asked
// for: `go test ./...` skips TestLoad without starting anything.
func TestMain(m *testing.M) {
	if os.Getenv("BLOODRAVEN_BENCH") == "" {
		os.Exit(m.Run())
	}
	os.Exit(testenv.Main(m, &env))
}

// params are the sizes of one run.
type params struct {
	Quick bool
	// Rounds of interleaved slices make a renewal cell (one slice of every
	// mode per round). Warmup and Measure are the two parts of a slice:
	// operations of the warm-up count for API requests per operation (the
	// scrapes bracket the whole slice), only those of Measure for ops/s and
	// latency.
	Rounds          int
	Warmup, Measure time.Duration
	// Idle is how long the operator's background traffic is measured.
	Idle       time.Duration
	Clients    []int
	Databases  []int
	Namespaces int // the unrelated databases are spread over these
	// RevocationLeases live leases, one per group, are revoked at once.
	RevocationLeases int
	// Tombstones are created for the heap figure, then Settle waited.
	Tombstones int
	Settle     time.Duration
	// Workers create objects in parallel.
	Workers int
	// RenewalsOnly skips the heap and revocation figures; Modes are the
	// renewal modes measured.
	RenewalsOnly bool
	Modes        []string
}

func paramsFromEnv() params {
	p := params{
		Rounds: 5, Warmup: time.Second, Measure: 3 * time.Second, Idle: 5 * time.Second,
		Clients: []int{1, 8, 32}, Databases: []int{0, 5000}, Namespaces: 10,
		RevocationLeases: 100, Tombstones: 10000, Settle: 10 * time.Second, Workers: 16,
	}
	if os.Getenv("BENCH_QUICK") != "" {
		p.Quick = true
		p.Rounds, p.Warmup, p.Measure, p.Idle, p.Settle = 3, 300*time.Millisecond, time.Second, 2*time.Second, 3*time.Second
	}
	if smoke() {
		// The smallest of each figure: it proves the load generator builds
		// and runs, and measures nothing worth reading.
		p.Quick = true
		p.Rounds, p.Warmup, p.Measure, p.Idle, p.Settle = 1, 200*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
		p.Clients, p.Databases, p.RevocationLeases, p.Tombstones = []int{1}, []int{0}, 5, 200
	}
	// BENCH_CLIENTS, BENCH_DATABASES and BENCH_MODES (comma-separated)
	// narrow the renewal cells, BENCH_RENEWALS_ONLY skips the heap and revocation
	// figures: for profiling one cell, never for a report.
	if v := ints(os.Getenv("BENCH_CLIENTS")); v != nil {
		p.Clients = v
	}
	if v := ints(os.Getenv("BENCH_DATABASES")); v != nil {
		p.Databases = v
	}
	if v := ints(os.Getenv("BENCH_ROUNDS")); len(v) == 1 && v[0] > 0 {
		p.Rounds = v[0]
	}
	p.RenewalsOnly = os.Getenv("BENCH_RENEWALS_ONLY") != ""
	p.Modes = []string{modeFloor, modeProduct, modePeer}
	if v := os.Getenv("BENCH_MODES"); v != "" {
		p.Modes = nil
		for _, m := range strings.Split(v, ",") {
			if !slices.Contains(p.Modes, m) {
				p.Modes = append(p.Modes, m)
			}
		}
	}
	return p
}

// ints parses a comma-separated list of integers; nil when s is empty or
// any element is not an integer.
func ints(s string) []int {
	if s == "" {
		return nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil
		}
		out = append(out, n)
	}
	return out
}

func maxInt(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// smoke is BENCH_SMOKE=1, what `make test` runs: every table at its
// smallest size, in well under a minute; `make bench` gives the figures.
func smoke() bool { return os.Getenv("BENCH_SMOKE") != "" }
