package leases

// Lease TTL bounds of the deployment API (docs/api.md): a record's ttl is
// always within them (policy.ClampTTL decides it).
const (
	MinTTLSeconds     int64 = 5
	MaxTTLSeconds     int64 = 120
	DefaultTTLSeconds int64 = 30
)
