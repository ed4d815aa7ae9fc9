package mysql

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/mariadblocal"
)

// rejoinInBackground runs Rejoin of iad toward pdx; done gets its result.
func rejoinInBackground(ctx context.Context, d *Driver, g *bloodravenv1alpha1.MysqlFailoverGroup) <-chan error {
	done := make(chan error, 1)
	go func() { done <- d.Rejoin(ctx, g, "iad", "pdx") }()
	return done
}

// waitForWaiter waits (in real time, bounded) until something waits on clk;
// it fails the test if Rejoin returns first or nothing ever waits.
func waitForWaiter(t *testing.T, clk *clocktesting.FakeClock, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !clk.HasWaiters() {
		select {
		case err := <-done:
			t.Fatalf("Rejoin returned (%v) without ever waiting on the driver's clock", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("Rejoin never waited on the driver's clock")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Rejoin waits for the replica's threads on the driver's clock, and stops
// waiting when its context ends. At the fix, it slept 100 ms at a time on
// the process's clock for up to 5 s of wall time, whatever the injected
// clock said and whether or not its context had ended.
func TestRejoinWaitsOnTheDriversClockAndStopsWhenItsContextEnds(t *testing.T) {
	if err := mariadblocal.Available(); err != nil {
		t.Fatal(err) // CI installs it; a missing server is a failure, not a skip
	}
	iad, err := mariadblocal.Start(context.Background(), t.TempDir()+"/iad", "iad", freePort(t), 1, "bloodraven", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(iad.Kill)
	// pdx, the primary iad is pointed at, never answers: iad's IO thread
	// keeps connecting, and Rejoin keeps waiting.
	g := &bloodravenv1alpha1.MysqlFailoverGroup{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "db", UID: "uid-orders"},
		Spec: bloodravenv1alpha1.MysqlFailoverGroupSpec{Sites: []bloodravenv1alpha1.Site{
			{Name: "iad", Host: "127.0.0.1", Port: int32(iad.Port)},
			{Name: "pdx", Host: "127.0.0.1", Port: int32(freePort(t))},
		}}}
	d := New(Static(Account{User: "bloodraven", Password: "s3cret"}))
	t.Cleanup(d.Close)

	t.Run("its 5 s are measured on the driver's clock", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
		d.Clock = clk
		start := time.Now()
		done := rejoinInBackground(context.Background(), d, g)
		waitForWaiter(t, clk, done)
		var err error
	steps:
		for {
			select {
			case err = <-done:
				break steps
			case <-time.After(10 * time.Millisecond):
				if clk.HasWaiters() {
					clk.Step(time.Second)
				}
			}
			if time.Since(start) > 30*time.Second {
				t.Fatal("Rejoin did not return after its clock passed its 5 s")
			}
		}
		if err == nil || !strings.Contains(err.Error(), "did not start within") || errors.Is(err, ErrErrantTransactions) {
			t.Fatalf("Rejoin toward a primary that never answers: %v, want replication did not start", err)
		}
		if took := time.Since(start); took >= rejoinWait {
			t.Fatalf("Rejoin took %v of wall time: it waited on the process's clock, not the driver's", took)
		}
	})

	t.Run("a cancelled context ends its wait", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
		d.Clock = clk // never stepped: only the context can end the wait
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := rejoinInBackground(ctx, d, g)
		waitForWaiter(t, clk, done)
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Rejoin after its context was cancelled: %v, want context.Canceled", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("Rejoin went on waiting after its context was cancelled")
		}
	})

	t.Run("an expired context ends its wait", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
		d.Clock = clk // never stepped: only the deadline can end the wait
		// As a leadership confirmed by topology.ConfirmLeading runs out.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		done := rejoinInBackground(ctx, d, g)
		waitForWaiter(t, clk, done)
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Rejoin after its deadline: %v, want context.DeadlineExceeded", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Rejoin went on waiting after its deadline")
		}
	})
}
