// Package topology is what the group controller needs from the data plane:
// probe the sites, promote one, fence one, and the data-plane steps of an
// ordered update and a restore-in-place. The controller decides (package
// policy); a Driver only acts and reports.
//
// Guarantees a Driver must give: Probe has no side effects; Promote, Fence,
// FenceOthers, UpdateSite and RestoreSite are idempotent (the controller
// repeats a step after a crash or a conflict); Promote(site, generation)
// leaves site writable and every other reachable site read-only and
// replicating from it, and records the generation where the data plane can
// check it; FenceOthers(target) returns nil only once every other site
// answered read-only and target applied what they wrote, and skips no site.
// Promote(planned) runs FenceOthers first and fails when it fails, so a
// planned promotion never opens target while a site it cannot reach may be
// writable.
//
// Every probe of one site is bounded by ProbeTimeout. A driver that
// implements SiteProber can be probed one site at a time (package
// topology/prober). An emergency Promote (planned false) may skip the sites
// the context names (WithSkipped): sites just seen dead, which it would
// otherwise dial and wait on; a planned Promote ignores the hint.
//
// Not guaranteed by this package: that a site reported unreachable is dead.
// The controller waits the group's detection budget before an emergency
// promotion, and fences a returning old primary before anything else.
//
// "Topology" names one thing in this project: which site of a group is
// primary, and which follow it. A Driver changes it, status.activeSite and
// status.topologyGeneration record and number it (the fence), and the
// controller's decisions about when to change it are its safety paths
// (policy.DecideSafety, controllers/safety.go).
//
// Package memory is a simulated driver for tests that need no database; it
// moves no data. Package mysql is the driver for MariaDB and MySQL 8.
package topology

import (
	"context"
	"errors"
	"fmt"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// SiteState is one site as probed.
type SiteState struct {
	Name               string
	Reachable          bool
	Writable           bool
	ReplicationRunning bool
	LagSeconds         float64
}

// Driver acts on a group's data plane.
type Driver interface {
	// Probe observes every site of g, in spec order.
	Probe(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup) ([]SiteState, error)
	// Promote makes site the writable primary of g under generation. planned
	// asks for a graceful switchover (FenceOthers first, failing when it
	// fails) rather than an emergency promotion.
	Promote(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, site string, generation int64, planned bool) error
	// Fence makes site read-only.
	Fence(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, site string) error
	// FenceOthers prepares a planned promotion of target: it makes every
	// other site of g read-only, confirms each by reading it back, and waits
	// until target has applied what each of them wrote. It skips no site: a
	// site it cannot reach or confirm is an *UnreachableError naming it, and
	// the caller must not promote. Sites fenced before the failure stay
	// fenced; the caller reopens the active site if it wants it back.
	FenceOthers(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, target string) error
	// UpdateSite applies revision to site (ordered update).
	UpdateSite(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, site, revision string) error
	// RestoreSite restores site's data in place for request id.
	RestoreSite(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, site, id string) error
}

// Rejoiner is implemented by drivers that can point a fenced site back at the
// primary. Rejoin must refuse (and leave the site fenced) when the site holds
// transactions the primary never had.
type Rejoiner interface {
	Rejoin(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, site, primary string) error
}

// FenceRecorder is implemented by drivers that record the fence on the
// data plane (the SQL driver's fence row). A rolled-back transition to
// target under generation may have left its record on some sites before it
// failed; UndoTransition puts back (previous, active) wherever the record
// is exactly (generation, target), so the move that never completed does
// not count as a newer move against the next one, or against reopening
// active. A record of any other move is left alone.
type FenceRecorder interface {
	UndoTransition(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, generation int64, target string, previous int64, active string) error
}

// UnreachableError says which site a planned step could not reach or
// confirm.
type UnreachableError struct {
	Site string
	Err  error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("site %s could not be fenced and confirmed read-only: %v", e.Site, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// ErrNoDriver is returned by the stand-in used when no driver is configured.
var ErrNoDriver = errors.New("no topology driver configured")

// None is the driver of an operator started without one: every probe says
// every site is unreachable, so the group honestly reports NoPrimary, and
// every action fails with ErrNoDriver. It never pretends a failover happened.
type None struct{}

// Probe reports every site unreachable.
func (None) Probe(_ context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup) ([]SiteState, error) {
	out := make([]SiteState, 0, len(g.Spec.Sites))
	for _, s := range g.Spec.Sites {
		out = append(out, SiteState{Name: s.Name})
	}
	return out, nil
}

// Promote fails.
func (None) Promote(context.Context, *bloodravenv1alpha1.MysqlFailoverGroup, string, int64, bool) error {
	return ErrNoDriver
}

// Fence fails.
func (None) Fence(context.Context, *bloodravenv1alpha1.MysqlFailoverGroup, string) error {
	return ErrNoDriver
}

// FenceOthers fails.
func (None) FenceOthers(context.Context, *bloodravenv1alpha1.MysqlFailoverGroup, string) error {
	return ErrNoDriver
}

// UpdateSite fails.
func (None) UpdateSite(context.Context, *bloodravenv1alpha1.MysqlFailoverGroup, string, string) error {
	return ErrNoDriver
}

// RestoreSite fails.
func (None) RestoreSite(context.Context, *bloodravenv1alpha1.MysqlFailoverGroup, string, string) error {
	return ErrNoDriver
}
