package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/shipstream/bloodraven/deployclient/wire"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/store/leasestore"
)

// HistoryRow is the fleet after some deploy cycles per group.
type HistoryRow struct {
	Cycles int `json:"cycles"`
	// LeasesPerGroup is the mean count of deployment Leases per group,
	// MaxLeases the largest, once bookkeeping settled.
	LeasesPerGroup float64 `json:"leasesPerGroup"`
	MaxLeases      int     `json:"maxLeases"`
	// HeapMiB is this process's live heap (the operator, its caches, the
	// bench) after a GC.
	HeapMiB float64 `json:"heapMiB"`
}

// historySettle is how long bookkeeping gets to forget the last cycle's
// holds: a released hold is deleted once its ttl (5 s here) has passed
// since it last could have held, at a reconcile (every probe interval,
// 10 s, or a Lease event). A smoke run waits a second: its figures are
// not read.
func historySettle() time.Duration {
	if smoke() {
		return time.Second
	}
	return 30 * time.Second
}

// TestDeployHistory runs deploy cycles on 20 groups at once, as a pipeline
// does them (grant the migration lease, take its failover-hold, renew
// both, release the hold, release the mutex; every cycle a fresh
// operation), and compares the deployment Leases per group and the heap
// after 10 cycles with the same after 1,000 (BENCH_HISTORY_CYCLES; quick:
// 50). History is bounded when both stay flat: a group keeps its mutex
// and no hold of an ended operation. Tombstones are never cached (the
// manager's Lease informer selects them out; TestTombstonesAreNeverCached
// in package operator), so none are made here. It fails only when a
// figure could not be produced.
func TestDeployHistory(t *testing.T) {
	if env == nil {
		t.Skip("the history bench runs only with BLOODRAVEN_BENCH=1 (make bench); it starts a control plane")
	}
	const groups = 20
	cycles := 1000
	if os.Getenv("BENCH_QUICK") != "" {
		cycles = 50
	}
	if smoke() {
		cycles = 12
	}
	if v, err := strconv.Atoi(os.Getenv("BENCH_HISTORY_CYCLES")); err == nil && v > 10 {
		cycles = v
	}
	ctx := context.Background()
	s := newScene(t)
	must(t, s.addGroups(ctx, groups, 16))
	run := func(from, to int) {
		t.Helper()
		start := time.Now()
		must(t, parallel(groups, groups, func(_, i int) error {
			for c := from; c < to; c++ {
				if err := s.deployCycle(ctx, i, c); err != nil {
					return err
				}
			}
			return nil
		}))
		step(t, "%d cycles on each of %d groups in %s", to-from, groups, time.Since(start).Round(time.Millisecond))
	}
	var rows []HistoryRow
	run(0, 10)
	rows = append(rows, s.history(ctx, t, 10))
	run(10, cycles)
	rows = append(rows, s.history(ctx, t, cycles))
	fmt.Print(historyTable(rows))
}

// deployCycle is one pipeline run on group i, operation c.
func (s *scene) deployCycle(ctx context.Context, i, c int) error {
	group, op := groupName(i), fmt.Sprintf("cycle-%05d", c)
	base := url.PathEscape(group) + "/leases"
	call := func(method, path string, body any, leaseToken string, want int) (apiAnswer, error) {
		var b []byte
		if body != nil {
			b, _ = json.Marshal(body)
		}
		a, err := s.deploy.do(ctx, method, path, s.setupToken, b, leaseToken)
		if err == nil && a.Status != want {
			err = fmt.Errorf("%d %s", a.Status, a.Error)
		}
		if err != nil {
			return a, fmt.Errorf("%s %s/%s: %w", method, group, path, err)
		}
		return a, nil
	}
	tokens := map[leases.Kind]string{}
	for _, kind := range []leases.Kind{leases.KindMigration, leases.KindFailoverHold} {
		a, err := call(http.MethodPost, base, wire.GrantRequest{Kind: string(kind), OperationID: op, Instance: dbName(i), TTLSeconds: 5}, "", http.StatusCreated)
		if err != nil {
			return err
		}
		tokens[kind] = a.Token
	}
	for _, kind := range []leases.Kind{leases.KindMigration, leases.KindFailoverHold} {
		if _, err := call(http.MethodPut, base+"/"+string(kind)+"/"+op, wire.RenewRequest{Token: tokens[kind]}, "", http.StatusOK); err != nil {
			return err
		}
	}
	for _, kind := range []leases.Kind{leases.KindFailoverHold, leases.KindMigration} {
		if _, err := call(http.MethodDelete, base+"/"+string(kind)+"/"+op, nil, tokens[kind], http.StatusNoContent); err != nil {
			return err
		}
	}
	return nil
}

// history waits for bookkeeping to settle, then counts the groups'
// deployment Leases (from the API server) and reads the heap.
func (s *scene) history(ctx context.Context, t *testing.T, cycles int) HistoryRow {
	t.Helper()
	time.Sleep(historySettle())
	var list coordinationv1.LeaseList
	must(t, env.Client.List(ctx, &list, client.InNamespace(s.o.Namespace), client.HasLabels{leasestore.LabelDeployLease}))
	per := map[string]int{}
	for _, l := range list.Items {
		if g := l.Labels[leasestore.LabelGroup]; strings.HasPrefix(g, "bench-") {
			per[g]++
		}
	}
	row := HistoryRow{Cycles: cycles}
	for _, n := range per {
		row.LeasesPerGroup += float64(n)
		row.MaxLeases = max(row.MaxLeases, n)
	}
	if len(per) > 0 {
		row.LeasesPerGroup /= float64(len(per))
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	row.HeapMiB = float64(ms.HeapAlloc) / (1 << 20)
	return row
}

func historyTable(rows []HistoryRow) string {
	var b strings.Builder
	fmt.Fprintln(&b, "\ndeploy history: 20 groups, every cycle a fresh operation (migration + hold, renewed, released)")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cycles per group\tLeases per group\tmost Leases in a group\theap MiB\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%.1f\t%d\t%.1f\t\n", r.Cycles, r.LeasesPerGroup, r.MaxLeases, r.HeapMiB)
	}
	_ = tw.Flush()
	return b.String()
}
