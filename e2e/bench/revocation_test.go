package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/internal/operatortest"
	"github.com/shipstream/bloodraven/leases"
	"github.com/shipstream/bloodraven/store/leasestore"
)

const (
	revocationPoll    = 10 * time.Millisecond
	steadyRenewal     = time.Second
	revocationTimeout = 60 * time.Second
)

// firstSeen records, per lease, the first time something was observed.
type firstSeen struct {
	mu sync.Mutex
	at []time.Time
	n  int
}

func newFirstSeen(n int) *firstSeen { return &firstSeen{at: make([]time.Time, n)} }

// see records t for i unless i was seen before; it tells whether it did.
func (f *firstSeen) see(i int, t time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.at[i].IsZero() {
		return false
	}
	f.at[i] = t
	f.n++
	return true
}

func (f *firstSeen) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

func (f *firstSeen) times() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.at...)
}

// measureRevocation grants n live migration leases (one per group), kills
// every group's primary at once so that the operator fails each over to a
// new generation, and measures per lease how long after the new generation
// is observed its renewal is refused and its tombstone exists.
//
// Every lease renews every steadyRenewal from before the kill (the
// failovers happen under renewal load, as they would), then every
// revocationPoll from the moment its group's failover is seen to begin
// (status.transition set, or the generation already bumped): the fence is
// measured from the bump, to revocationPoll's precision. Renewals must not
// delay the failovers: before the operator stopped reconciling a group on
// every mutex renewal, 100 leases renewing every 10 ms from the kill let
// only 14 of 100 groups fail over within 65 s.
func (s *scene) measureRevocation(ctx context.Context, n, workers int) (Revocation, error) {
	if err := s.addGroups(ctx, n, workers); err != nil {
		return Revocation{}, err
	}
	opIDs := make([]string, n)
	leaseTokens := make([]string, n)
	tombIndex := map[string]int{}
	for i := range opIDs {
		opIDs[i] = fmt.Sprintf("bench-revocation-%d", i)
		tombIndex[leases.TombstoneName(groupName(i), opIDs[i])] = i
	}
	if err := parallel(n, workers, func(_, i int) error {
		tok, err := s.deploy.grant(ctx, s.setupToken, groupName(i), opIDs[i], dbName(i))
		leaseTokens[i] = tok
		return err
	}); err != nil {
		return Revocation{}, err
	}
	if err := s.waitGenerations(ctx, func(int) int64 { return 1 }, time.Minute); err != nil {
		return Revocation{}, err
	}
	gen0 := make([]int64, n)
	groupIndex := map[string]int{}
	for i := range gen0 {
		gen0[i] = s.groups[i].Status.TopologyGeneration
		groupIndex[groupName(i)] = i
	}

	// Every lease renews once under the old generation.
	bearer := s.tokens(1)[0] // one token shared by the pollers
	if err := parallel(n, workers, func(_, i int) error {
		a, err := s.deploy.renew(ctx, bearer, groupName(i), opIDs[i], renewBody(leaseTokens[i]))
		if err == nil && a.Status != http.StatusOK {
			err = fmt.Errorf("renew %s/%s before the kill: %d %s", groupName(i), opIDs[i], a.Status, a.Error)
		}
		return err
	}); err != nil {
		return Revocation{}, err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	genSeen, tombSeen, refused := newFirstSeen(n), newFirstSeen(n), newFirstSeen(n)
	failingOver := make([]chan struct{}, n)
	for i := range failingOver {
		failingOver[i] = make(chan struct{})
	}
	begun := newFirstSeen(n)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	wc, err := client.NewWithWatch(s.cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		return Revocation{}, err
	}
	// The revocation's tombstones, not those of the heap figure (they are
	// operatortest's group's).
	isTomb, _ := labels.NewRequirement(leasestore.LabelKind, selection.Equals, []string{string(leases.KindTombstone)})
	notHeap, _ := labels.NewRequirement(leasestore.LabelGroup, selection.NotEquals, []string{operatortest.GroupName})
	tombstones := labels.NewSelector().Add(*isTomb, *notHeap)
	groupWatch := func() (watch.Interface, error) {
		return wc.Watch(ctx, &bloodravenv1alpha1.MysqlFailoverGroupList{}, client.InNamespace(s.o.Namespace))
	}
	tombWatch := func() (watch.Interface, error) {
		return wc.Watch(ctx, &coordinationv1.LeaseList{}, client.InNamespace(s.o.Namespace),
			client.MatchingLabelsSelector{Selector: tombstones})
	}
	watchErrs := make(chan error, 2)
	onGroup := func(obj any, at time.Time) {
		if g, ok := obj.(*bloodravenv1alpha1.MysqlFailoverGroup); ok {
			i, ok := groupIndex[g.Name]
			if !ok {
				return
			}
			bumped := g.Status.TopologyGeneration > gen0[i]
			if (bumped || g.Status.Transition != nil) && begun.see(i, at) {
				close(failingOver[i])
			}
			if bumped {
				genSeen.see(i, at)
			}
		}
	}
	onTomb := func(obj any, at time.Time) {
		if l, ok := obj.(*coordinationv1.Lease); ok {
			if i, ok := tombIndex[l.Name]; ok {
				tombSeen.see(i, at)
			}
		}
	}
	for _, w := range []struct {
		start func() (watch.Interface, error)
		on    func(any, time.Time)
	}{{groupWatch, onGroup}, {tombWatch, onTomb}} {
		wi, err := w.start()
		if err != nil {
			return Revocation{}, fmt.Errorf("watch: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			watchErrs <- follow(ctx, wi, w.start, w.on)
		}()
	}

	answers := map[string]int{}
	var answersMu sync.Mutex
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := renewBody(leaseTokens[i])
			begins := failingOver[i] // nil once the failover has begun
			for ctx.Err() == nil {
				a, err := s.deploy.renew(ctx, bearer, groupName(i), opIDs[i], body)
				at := time.Now()
				key := "transport error"
				if err == nil {
					key = strconv.Itoa(a.Status) + " " + a.Error
				}
				answersMu.Lock()
				answers[key]++
				answersMu.Unlock()
				if err == nil && a.Status == http.StatusConflict && a.Error == "revoked" {
					refused.see(i, at)
					return
				}
				wait := revocationPoll
				if begins != nil {
					wait = steadyRenewal
				}
				timer := time.NewTimer(wait)
				select {
				case <-ctx.Done():
				case <-timer.C:
				case <-begins:
					begins = nil
				}
				timer.Stop()
			}
		}()
	}

	killed := time.Now()
	for i := 0; i < n; i++ {
		g := s.groups[i]
		s.o.Driver.Kill(g, g.Status.ActiveSite)
	}
	deadline := killed.Add(time.Duration(s.groups[0].Spec.FailureDetectionSeconds)*time.Second + revocationTimeout)
	for genSeen.count() < n || refused.count() < n || tombSeen.count() < n {
		select {
		case err := <-watchErrs:
			return Revocation{}, err
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			answersMu.Lock()
			defer answersMu.Unlock()
			return Revocation{}, fmt.Errorf("after %s: new generation seen for %d of %d groups, renewal refused for %d, tombstone seen for %d (answers %v)",
				time.Since(killed).Round(time.Second), genSeen.count(), n, refused.count(), tombSeen.count(), answers)
		}
	}
	cancel()
	wg.Wait()

	gens, refs, tombs := genSeen.times(), refused.times(), tombSeen.times()
	var lastGen time.Time
	refusedAfter := make([]time.Duration, n)
	tombAfter := make([]time.Duration, n)
	for i := range gens {
		if gens[i].After(lastGen) {
			lastGen = gens[i]
		}
		refusedAfter[i] = refs[i].Sub(gens[i])
		tombAfter[i] = tombs[i].Sub(gens[i])
	}
	return Revocation{
		Leases: n, FailoverSeconds: lastGen.Sub(killed).Seconds(), PollIntervalMs: float64(revocationPoll.Milliseconds()),
		Refused: statsOf(refusedAfter), Tombstone: statsOf(tombAfter), Answers: answers,
	}, nil
}

// follow hands every object a watch delivers to on, with the time it
// arrived, and re-establishes the watch when the API server ends it, until
// ctx ends.
func follow(ctx context.Context, w watch.Interface, restart func() (watch.Interface, error), on func(any, time.Time)) error {
	for {
		for ev := range w.ResultChan() {
			at := time.Now()
			switch ev.Type {
			case watch.Added, watch.Modified:
				on(ev.Object, at)
			case watch.Error:
				w.Stop()
				return fmt.Errorf("watch: %v", ev.Object)
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return nil
		}
		var err error
		if w, err = restart(); err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return fmt.Errorf("re-watch: %w", err)
		}
	}
}
