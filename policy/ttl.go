package policy

import "github.com/shipstream/bloodraven/leases"

// ClampTTL is the ttl a lease gets. requested is the caller's ttlSeconds, nil
// when omitted or null; current is what applies then: leases.DefaultTTLSeconds for a
// grant, the lease's own ttl for a renewal. Any integer is clamped to
// [leases.MinTTLSeconds, leases.MaxTTLSeconds]; 0 and negatives become MinTTLSeconds.
func ClampTTL(requested *int64, current int64) int64 {
	ttl := current
	if requested != nil {
		ttl = *requested
	}
	return min(max(ttl, leases.MinTTLSeconds), leases.MaxTTLSeconds)
}
