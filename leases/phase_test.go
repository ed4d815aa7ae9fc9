package leases

import "testing"

func TestAPhaseOnlyMovesForward(t *testing.T) {
	cases := []struct {
		cur, sent, want Phase
	}{
		{"", "", ""},
		{"", PhasePreDDL, PhasePreDDL},
		{"", PhaseDDL, PhaseDDL},
		{PhasePreDDL, PhaseDone, PhaseDone},
		{PhaseDDL, PhasePreDDL, PhaseDDL},
		{PhaseDDL, "", PhaseDDL},
		{PhaseDone, PhaseDDL, PhaseDone},
		{PhaseDone, PhaseDone, PhaseDone},
	}
	for _, tc := range cases {
		if got := (Record{Phase: tc.cur}).Advanced(tc.sent).Phase; got != tc.want {
			t.Errorf("%q advanced by %q = %q, want %q", tc.cur, tc.sent, got, tc.want)
		}
	}
	for _, s := range []string{"DDL", "", "done ", "post-ddl"} {
		if _, ok := ParsePhase(s); ok {
			t.Errorf("ParsePhase(%q) accepted", s)
		}
	}
}
