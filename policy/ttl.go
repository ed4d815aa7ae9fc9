package policy

// Lease TTL bounds of the deployment API (docs/api.md).
const (
	MinTTLSeconds     int64 = 5
	MaxTTLSeconds     int64 = 120
	DefaultTTLSeconds int64 = 30
)

// ClampTTL is the ttl a lease gets. requested is the caller's ttlSeconds, nil
// when omitted or null; current is what applies then: DefaultTTLSeconds for a
// grant, the lease's own ttl for a renewal. Any integer is clamped to
// [MinTTLSeconds, MaxTTLSeconds]; 0 and negatives become MinTTLSeconds.
func ClampTTL(requested *int64, current int64) int64 {
	ttl := current
	if requested != nil {
		ttl = *requested
	}
	return min(max(ttl, MinTTLSeconds), MaxTTLSeconds)
}
