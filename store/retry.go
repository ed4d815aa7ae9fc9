package store

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// MaxAttempts bounds every optimistic-concurrency loop of the project.
const MaxAttempts = 8

// ErrStale asks Retry for another attempt from fresh reads: the attempt
// decided on a cached read it must confirm before acting on it.
var ErrStale = errors.New("decided on a possibly stale read")

// ErrContended is returned when every attempt lost a race.
var ErrContended = errors.New("still conflicting after retries")

// Retry is the one optimistic-retry loop: it runs attempt until it
// returns nil or an error other than a Conflict or AlreadyExists from the API
// server, or ErrStale. The first attempt may read from a cache (fresh is
// false); every later one must read from the API server. After MaxAttempts
// lost races it returns ErrContended.
func Retry(attempt func(fresh bool) error) error {
	for i := 0; i < MaxAttempts; i++ {
		err := attempt(i > 0)
		if !Retryable(err) {
			return err
		}
	}
	return ErrContended
}

// Retryable tells whether err is a lost race worth another attempt.
func Retryable(err error) bool {
	return err != nil && (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || errors.Is(err, ErrStale))
}
