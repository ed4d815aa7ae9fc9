package leases

import (
	"strings"
	"testing"
)

func TestTokenMatches(t *testing.T) {
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != 43 { // 32 bytes, base64url without padding
		t.Fatalf("token length %d", len(tok))
	}
	h := HashToken(tok)
	tests := map[string]struct {
		token, hash string
		want        bool
	}{
		"its own hash":  {tok, h, true},
		"another token": {tok + "x", h, false},
		"empty token":   {"", h, false},
		"empty hash":    {tok, "", false},
	}
	for name, tc := range tests {
		if got := TokenMatches(tc.token, tc.hash); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

func TestNamesAreValidForLongGroups(t *testing.T) {
	long := strings.Repeat("g", 253)
	for _, n := range []string{MigrationName(long), HoldName(long, "op"), TombstoneName(long, "op"), MigrationName("orders")} {
		if len(n) > 253 {
			t.Errorf("name %q is too long", n)
		}
	}
	if MigrationName("orders") != "bloodraven-migration-orders" {
		t.Errorf("short names stay readable: %s", MigrationName("orders"))
	}
	if LabelValue(long) == long {
		t.Error("a group name too long for a label value is used as one")
	}
}
