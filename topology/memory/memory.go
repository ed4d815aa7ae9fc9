// Package memory is a simulated topology driver: sites are records in
// memory, promotion flips flags. It is for tests and demonstrations only and
// moves no data. Tests steer it with Kill, Hang, HangInPromote, Revive and
// SetLag.
package memory

import (
	"context"
	"fmt"
	"sync"
	"time"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
	"github.com/shipstream/bloodraven/topology"
)

type site struct {
	reachable, writable, replicating bool
	// hung: the site accepts and never answers; every call that touches
	// it costs HangCost (bounded by the caller's context), then fails.
	hung                 bool
	lag                  float64
	revision, restoredID string
	generation           int64
	updateErr            error
}

// Driver is a simulated data plane keyed by namespace/group/site.
type Driver struct {
	// AutoSeed seeds a group on its first probe, its first site the primary
	// (the playground's simulated sites).
	AutoSeed bool

	// HangCost is what a call to a hung site costs before it fails: the
	// simulation of a paused MariaDB, whose dial succeeds and whose queries
	// answer nothing until the caller's deadline. Default
	// topology.ProbeTimeout.
	HangCost time.Duration

	mu    sync.Mutex
	sites map[string]*site
	// hangInPromote: per group (namespace/name), the site its next
	// Promote finds hung after opening its target (HangInPromote).
	hangInPromote map[string]string
	// Calls records every action, for assertions ("promote iad 2").
	Calls []string
}

var (
	_ topology.Driver     = (*Driver)(nil)
	_ topology.SiteProber = (*Driver)(nil)
)

// New returns an empty simulated data plane.
func New() *Driver { return &Driver{sites: map[string]*site{}} }

func key(g *bloodravenv1alpha1.MysqlFailoverGroup, s string) string {
	return g.Namespace + "/" + g.Name + "/" + s
}

// Seed declares g's sites: primary writable, the others replicating from it.
func (d *Driver) Seed(g *bloodravenv1alpha1.MysqlFailoverGroup, primary string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range g.Spec.Sites {
		d.sites[key(g, s.Name)] = &site{reachable: true, writable: s.Name == primary, replicating: s.Name != primary}
	}
}

func (d *Driver) with(g *bloodravenv1alpha1.MysqlFailoverGroup, name string, f func(*site)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.sites[key(g, name)]; ok {
		f(s)
	}
}

// Kill makes a site unreachable (its flags are kept, as a crashed server's
// configuration would be).
func (d *Driver) Kill(g *bloodravenv1alpha1.MysqlFailoverGroup, name string) {
	d.with(g, name, func(s *site) { s.reachable = false })
}

// Hang makes a site accept and never answer, as a paused (SIGSTOP) or
// black-holed server does: every call that touches it waits HangCost, or
// until its context ends, and then fails. Kill is the refused case: it
// fails at once.
func (d *Driver) Hang(g *bloodravenv1alpha1.MysqlFailoverGroup, name string) {
	d.with(g, name, func(s *site) { s.reachable, s.hung = false, true })
}

// HangInPromote makes site, another site of g, hang in the middle of g's
// next Promote (simulated): that promotion passes its fence (a planned one
// found every site reachable) and opens its target, as the SQL driver does
// before it points the other sites at the new primary; then site hangs, as
// a primary paused (SIGSTOP) or cut off at that moment does. site keeps its
// flags and answers nothing from then on (Hang), and the call waits
// HangCost and fails with a *topology.UnreachableError naming site, the
// target left writable. One promotion spends it.
func (d *Driver) HangInPromote(g *bloodravenv1alpha1.MysqlFailoverGroup, site string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.hangInPromote == nil {
		d.hangInPromote = map[string]string{}
	}
	d.hangInPromote[g.Namespace+"/"+g.Name] = site
}

// Revive makes a site reachable again, as it was when killed or hung.
func (d *Driver) Revive(g *bloodravenv1alpha1.MysqlFailoverGroup, name string) {
	d.with(g, name, func(s *site) { s.reachable, s.hung = true, false })
}

// hang waits what a call to a hung site costs.
func (d *Driver) hang(ctx context.Context) {
	cost := d.HangCost
	if cost <= 0 {
		cost = topology.ProbeTimeout
	}
	t := time.NewTimer(cost)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// isHung tells whether the site is hung.
func (d *Driver) isHung(g *bloodravenv1alpha1.MysqlFailoverGroup, name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.sites[key(g, name)]
	return ok && s.hung
}

// SetLag sets a site's replication lag.
func (d *Driver) SetLag(g *bloodravenv1alpha1.MysqlFailoverGroup, name string, lag float64) {
	d.with(g, name, func(s *site) { s.lag = lag })
}

// Probe reports the simulated sites; hung sites are probed in parallel,
// as the SQL driver does.
func (d *Driver) Probe(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup) ([]topology.SiteState, error) {
	hung := false
	for _, sp := range g.Spec.Sites {
		hung = hung || d.isHung(g, sp.Name)
	}
	if hung {
		d.hang(ctx)
	}
	return d.probe(g), nil
}

// ProbeSite reports one simulated site; a hung one costs HangCost.
func (d *Driver) ProbeSite(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, name string) (topology.SiteState, error) {
	if d.isHung(g, name) {
		d.hang(ctx)
		return topology.SiteState{Name: name}, nil
	}
	for _, s := range d.probe(g) {
		if s.Name == name {
			return s, nil
		}
	}
	return topology.SiteState{Name: name}, nil
}

func (d *Driver) probe(g *bloodravenv1alpha1.MysqlFailoverGroup) []topology.SiteState {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.AutoSeed && len(g.Spec.Sites) > 0 {
		for i, sp := range g.Spec.Sites {
			if _, ok := d.sites[key(g, sp.Name)]; !ok {
				w := i == 0 && !d.anyWritable(g)
				d.sites[key(g, sp.Name)] = &site{reachable: true, writable: w, replicating: !w}
			}
		}
	}
	out := make([]topology.SiteState, 0, len(g.Spec.Sites))
	for _, sp := range g.Spec.Sites {
		st := topology.SiteState{Name: sp.Name}
		if s, ok := d.sites[key(g, sp.Name)]; ok && s.reachable {
			st.Reachable, st.Writable, st.ReplicationRunning, st.LagSeconds = true, s.writable, s.replicating, s.lag
		}
		out = append(out, st)
	}
	return out
}

func (d *Driver) anyWritable(g *bloodravenv1alpha1.MysqlFailoverGroup) bool {
	for _, sp := range g.Spec.Sites {
		if s, ok := d.sites[key(g, sp.Name)]; ok && s.writable {
			return true
		}
	}
	return false
}

// Promote makes target writable and every other reachable site a replica.
// A planned promotion first fences every other site, and fails on one that
// is unreachable (FenceOthers). An emergency promotion tries every other
// site, and a hung one costs HangCost, unless the context skips it
// (topology.WithSkipped).
func (d *Driver) Promote(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, target string, generation int64, planned bool) error {
	// As the SQL driver: a deposed leader opens nothing.
	if _, cancel, err := topology.ConfirmLeading(ctx); err != nil {
		return fmt.Errorf("promote %s: %w", target, err)
	} else {
		cancel()
	}
	for _, sp := range g.Spec.Sites {
		if sp.Name == target || !d.isHung(g, sp.Name) || (!planned && topology.Skipped(ctx, sp.Name)) {
			continue
		}
		if d.hang(ctx); planned {
			return &topology.UnreachableError{Site: sp.Name, Err: fmt.Errorf("simulated site hung")}
		}
	}
	hung, err := d.promote(g, target, generation, planned)
	if err != nil || hung == "" {
		return err
	}
	d.hang(ctx)
	return &topology.UnreachableError{Site: hung, Err: fmt.Errorf("simulated site hung while %s was being promoted", target)}
}

// promote is Promote's change of the flags, with d.mu held. It returns the
// site a HangInPromote hung after target was opened; "" when none.
func (d *Driver) promote(g *bloodravenv1alpha1.MysqlFailoverGroup, target string, generation int64, planned bool) (hung string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.sites[key(g, target)]
	if !ok || !t.reachable {
		return "", fmt.Errorf("promote %s: site unreachable", target)
	}
	if planned {
		if err := d.fenceOthers(g, target); err != nil {
			return "", err
		}
	}
	gk := g.Namespace + "/" + g.Name
	if hung = d.hangInPromote[gk]; hung != "" {
		delete(d.hangInPromote, gk)
		t.writable, t.replicating, t.lag, t.generation = true, false, 0, generation
		if s, ok := d.sites[key(g, hung)]; ok {
			s.reachable, s.hung = false, true
		}
		d.Calls = append(d.Calls, fmt.Sprintf("promote %s %d planned=%v interrupted: %s hung", target, generation, planned, hung))
		return hung, nil
	}
	for _, sp := range g.Spec.Sites {
		s, ok := d.sites[key(g, sp.Name)]
		if !ok || !s.reachable || sp.Name == target {
			continue
		}
		s.writable, s.replicating = false, true
	}
	t.writable, t.replicating, t.lag, t.generation = true, false, 0, generation
	d.Calls = append(d.Calls, fmt.Sprintf("promote %s %d planned=%v", target, generation, planned))
	return "", nil
}

// act applies f to a reachable site and records call.
func (d *Driver) act(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, name, call string, f func(*site) error) error {
	if d.isHung(g, name) {
		d.hang(ctx)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.sites[key(g, name)]
	if !ok || !s.reachable {
		return fmt.Errorf("%s: site %s unreachable", call, name)
	}
	if err := f(s); err != nil {
		return err
	}
	d.Calls = append(d.Calls, call)
	return nil
}

// Fence makes a site read-only.
func (d *Driver) Fence(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, name string) error {
	return d.act(ctx, g, name, "fence "+name, func(s *site) error { s.writable = false; return nil })
}

// FenceOthers fences every site but target, failing with an
// *topology.UnreachableError for the first one that is unreachable (or
// unknown); target must be reachable too.
func (d *Driver) FenceOthers(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, target string) error {
	for _, sp := range g.Spec.Sites {
		if d.isHung(g, sp.Name) {
			d.hang(ctx)
			return &topology.UnreachableError{Site: sp.Name, Err: fmt.Errorf("simulated site hung")}
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.fenceOthers(g, target); err != nil {
		return err
	}
	d.Calls = append(d.Calls, "fence-others "+target)
	return nil
}

// fenceOthers is FenceOthers with d.mu held.
func (d *Driver) fenceOthers(g *bloodravenv1alpha1.MysqlFailoverGroup, target string) error {
	if t, ok := d.sites[key(g, target)]; !ok || !t.reachable {
		return &topology.UnreachableError{Site: target, Err: fmt.Errorf("simulated site unreachable")}
	}
	for _, sp := range g.Spec.Sites {
		if sp.Name == target {
			continue
		}
		s, ok := d.sites[key(g, sp.Name)]
		if !ok || !s.reachable {
			return &topology.UnreachableError{Site: sp.Name, Err: fmt.Errorf("simulated site unreachable")}
		}
		s.writable = false
	}
	return nil
}

// FailUpdates makes every UpdateSite of a site fail with err (nil: succeed
// again), as a rollout that does not come up would.
func (d *Driver) FailUpdates(g *bloodravenv1alpha1.MysqlFailoverGroup, name string, err error) {
	d.with(g, name, func(s *site) { s.updateErr = err })
}

// UpdateSite records the revision.
func (d *Driver) UpdateSite(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, name, revision string) error {
	return d.act(ctx, g, name, "update "+name+" "+revision, func(s *site) error {
		if s.updateErr != nil {
			return s.updateErr
		}
		s.revision = revision
		return nil
	})
}

// RestoreSite records the restore.
func (d *Driver) RestoreSite(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, name, id string) error {
	return d.act(ctx, g, name, "restore "+name+" "+id, func(s *site) error { s.restoredID = id; return nil })
}

// Generation is the generation last written to a site by Promote.
func (d *Driver) Generation(g *bloodravenv1alpha1.MysqlFailoverGroup, name string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.sites[key(g, name)]; ok {
		return s.generation
	}
	return 0
}

// Rejoin makes a fenced site replicate from primary.
func (d *Driver) Rejoin(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, name, primary string) error {
	if _, cancel, err := topology.ConfirmLeading(ctx); err != nil {
		return fmt.Errorf("rejoin %s: %w", name, err)
	} else {
		cancel()
	}
	return d.act(ctx, g, name, "rejoin "+name+" "+primary, func(s *site) error {
		if s.writable {
			return fmt.Errorf("rejoin %s: site not fenced", name)
		}
		s.replicating = true
		return nil
	})
}

// Writable reports the simulated read_only flag of a site, also while it is
// unreachable: what the server would say once it answers again. Tests use it
// to check that no two sites are ever writable.
func (d *Driver) Writable(g *bloodravenv1alpha1.MysqlFailoverGroup, name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.sites[key(g, name)]
	return ok && s.writable
}
