package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/shipstream/bloodraven/internal/devenv"
)

// The leading operator is killed (SIGKILL) while grants for one operation
// are in flight, three times. No half-made state: once the restarted
// operator leads, a retried POST for the same operation gets 200 or 201,
// the group lists exactly one migration holder, that operation, and its
// release works.
func TestOperatorKilledMidGrant(t *testing.T) {
	t.Parallel() // it waits far more than it computes (e2e/doc.go, "Phases")
	ctx := context.Background()
	p, cfg := upPlayground(t)
	c := deployClient(t, p)
	api := groupAPI(cfg.TLSAddr)
	body := func(op string) map[string]any {
		return map[string]any{"kind": "migration", "operationId": op, "instance": devenv.DatabaseName, "ttlSeconds": 120}
	}
	for i := 0; i < 3; i++ {
		op := fmt.Sprintf("op-kill-%d", i)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		counts := map[int]int{}
		var mu sync.Mutex
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					st, _ := c.tryCall(http.MethodPost, api+"/leases", body(op))
					mu.Lock()
					counts[st]++
					mu.Unlock()
					if st == 0 || st == http.StatusServiceUnavailable {
						time.Sleep(20 * time.Millisecond)
					}
				}
			}()
		}
		time.Sleep(time.Duration(50+rand.IntN(250)) * time.Millisecond) // grants in flight
		if err := p.Operator().Kill(); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		restarted, err := p.WaitRestart(ctx, i, 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.WaitLeader(ctx, restarted, 60*time.Second); err != nil {
			t.Fatal(err)
		}
		close(stop)
		wg.Wait()
		st, g := c.call(http.MethodPost, api+"/leases", body(op))
		if st != http.StatusOK && st != http.StatusCreated {
			t.Fatalf("round %d: the retried grant answered %d %v", i, st, g)
		}
		_, view := c.call(http.MethodGet, api, nil)
		ls, _ := view["leases"].([]any)
		if len(ls) != 1 || ls[0].(map[string]any)["operationId"] != op || ls[0].(map[string]any)["kind"] != "migration" {
			t.Fatalf("round %d: leases %v; want exactly %s holding the mutex", i, ls, op)
		}
		if st, _ := c.call(http.MethodDelete, api+"/leases/migration/"+op, nil, "X-Lease-Token", g["token"].(string)); st != http.StatusNoContent {
			t.Fatalf("round %d: release: %d", i, st)
		}
		t.Logf("round %d: killed with grants in flight; a leader again after %v; answers during the round %v; retried grant %d",
			i, time.Since(killed).Round(time.Millisecond), counts, st)
	}
}
