package authn

import (
	"strings"
	"testing"
	"time"
)

// FuzzParseClaims: the unverified claims of any bearer text decode without
// a panic; what decodes is JWT-shaped (three parts), a usable exp lies in
// (0, maxExp], and tokenExpiry agrees with it.
func FuzzParseClaims(f *testing.F) {
	for _, seed := range []string{
		jwt(`{"aud":["bloodraven-deploy"],"exp":1893456000,"iss":"https://kubernetes.default.svc"}`),
		jwt(`{"aud":"x","exp":1.5e9}`),
		jwt(`{"exp":"1893456000","iss":7}`),
		jwt(`[]`),
		"a.b.c", "..", "not-a-jwt", "",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, token string) {
		c, ok := parseClaims(token)
		if !ok {
			return
		}
		if strings.Count(token, ".") != 2 {
			t.Fatalf("%q decoded but is not three parts", token)
		}
		if c.hasExp && (!c.exp.After(time.Unix(0, 0)) || c.exp.After(time.Unix(maxExp, 0))) {
			t.Fatalf("exp %v outside (0, maxExp]", c.exp)
		}
		if exp, has := tokenExpiry(token); has != c.hasExp || !exp.Equal(c.exp) {
			t.Fatalf("tokenExpiry %v %v, claims %v %v", exp, has, c.exp, c.hasExp)
		}
	})
}
