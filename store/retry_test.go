package store

import (
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestRetryRunsALostRaceAgainFromFreshReads(t *testing.T) {
	gr := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	conflict := apierrors.NewConflict(gr, "l", errors.New("modified"))
	exists := apierrors.NewAlreadyExists(gr, "l")
	other := errors.New("refused")
	for _, tc := range []struct {
		name      string
		errs      []error // the attempts' answers, in order; nil after them
		want      error
		wantCalls int
	}{
		{"the first attempt wins", nil, nil, 1},
		{"a conflict is tried again", []error{conflict}, nil, 2},
		{"a create that lost is tried again", []error{exists}, nil, 2},
		{"a stale read is confirmed fresh", []error{fmt.Errorf("decided: %w", ErrStale)}, nil, 2},
		{"any other error ends it at once", []error{other}, other, 1},
		{"a loss then another error", []error{conflict, other}, other, 2},
		{"every attempt lost", []error{conflict, conflict, conflict, conflict, conflict, conflict, conflict, conflict}, ErrContended, MaxAttempts},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fresh []bool
			err := Retry(func(f bool) error {
				fresh = append(fresh, f)
				if i := len(fresh) - 1; i < len(tc.errs) {
					return tc.errs[i]
				}
				return nil
			})
			if !errors.Is(err, tc.want) && err != tc.want {
				t.Fatalf("Retry = %v, want %v", err, tc.want)
			}
			if len(fresh) != tc.wantCalls {
				t.Fatalf("%d attempts, want %d", len(fresh), tc.wantCalls)
			}
			for i, f := range fresh {
				if f != (i > 0) {
					t.Fatalf("attempt %d fresh=%v: only the first may read a cache", i, f)
				}
			}
		})
	}
}
