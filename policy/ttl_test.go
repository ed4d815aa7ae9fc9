package policy

import (
	"testing"

	"github.com/shipstream/bloodraven/leases"
)

func TestClampTTL(t *testing.T) {
	i := func(v int64) *int64 { return &v }
	tests := map[string]struct {
		requested *int64
		current   int64
		want      int64
	}{
		"omitted on grant uses the default":    {requested: nil, current: leases.DefaultTTLSeconds, want: 30},
		"omitted on renewal keeps the lease's": {requested: nil, current: 90, want: 90},
		"in range is kept":                     {requested: i(45), current: 30, want: 45},
		"lower bound is kept":                  {requested: i(5), current: 30, want: 5},
		"upper bound is kept":                  {requested: i(120), current: 30, want: 120},
		"below the minimum is raised":          {requested: i(4), current: 30, want: 5},
		"zero is raised to the minimum":        {requested: i(0), current: 30, want: 5},
		"negative is raised to the minimum":    {requested: i(-100), current: 30, want: 5},
		"above the maximum is lowered":         {requested: i(121), current: 30, want: 120},
		"huge is lowered to the maximum":       {requested: i(1 << 62), current: 30, want: 120},
		"a stored ttl out of range is clamped": {requested: nil, current: 600, want: 120},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := ClampTTL(tc.requested, tc.current); got != tc.want {
				t.Fatalf("ClampTTL = %d, want %d", got, tc.want)
			}
		})
	}
}
