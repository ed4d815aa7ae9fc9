package topology

import (
	"context"
	"time"

	bloodravenv1alpha1 "github.com/shipstream/bloodraven/api/v1alpha1"
)

// ProbeTimeout bounds one probe of one site, the dial and every query
// together. A site that has not answered within it is unreachable for that
// probe: a paused or black-holed server costs a probe this long, never more.
const ProbeTimeout = 2 * time.Second

// SiteProber is implemented by drivers that can probe one site of a group
// alone. The prober (package topology/prober) probes endpoints one by one,
// each on its own schedule, so that a hung site costs only its own probe.
type SiteProber interface {
	// ProbeSite observes one site of g; an unreachable site is reported
	// (Reachable false), not an error. It has no side effects.
	ProbeSite(ctx context.Context, g *bloodravenv1alpha1.MysqlFailoverGroup, site string) (SiteState, error)
}

type skippedKey struct{}

// WithSkipped returns a context that lets an emergency promotion skip the
// named sites: sites the prober has just seen dead. A driver's emergency
// Promote does not dial them (a hung host would cost its full timeout there
// too); it points only the sites it does dial at the new primary, and the
// controller fences and rejoins a skipped site when it answers again.
//
// A planned promotion ignores it: FenceOthers skips no site.
func WithSkipped(ctx context.Context, sites ...string) context.Context {
	if len(sites) == 0 {
		return ctx
	}
	set := map[string]bool{}
	for _, s := range sites {
		set[s] = true
	}
	return context.WithValue(ctx, skippedKey{}, set)
}

// Skipped tells whether ctx lets an emergency promotion skip site.
func Skipped(ctx context.Context, site string) bool {
	set, _ := ctx.Value(skippedKey{}).(map[string]bool)
	return set[site]
}
