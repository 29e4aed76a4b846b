package channels

import (
	"context"
	"time"
)

// Sleep waits for d, or until ctx is done; it reports whether it slept the whole time.
// Adapters back off with it, so that Stop never waits out a backoff.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Await runs fn in a goroutine and returns when fn has returned, or with ctx's error when
// ctx is done first; fn then finishes on its own. It is how Stop bounds its wait for an
// adapter's goroutines (fn waits on their WaitGroup) by the caller's context.
func Await(ctx context.Context, fn func()) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
