package channels

import (
	"context"
	"time"

	"gateway/internal/pace"
)

// Sender is the paced send with retry every adapter puts in front of its platform calls:
// it waits for the chat's (and the bot's) send slot, bounds each attempt by Timeout, and
// retries what Classify marks retryable under Policy. A rate limit (pace.RetryAfter) holds
// the chat for the platform's retry_after, so that every later send to it — a streaming
// edit, the final text, a split part, a voice note, typing — waits too, not only this one.
type Sender struct {
	Pacer    *pace.Pacer   // nil: no pacing and no holds
	Policy   pace.Policy   // retry bounds
	Timeout  time.Duration // one attempt; 0 means 30s
	Classify func(error) error
	// Scrub removes the adapter's secrets from the final error.
	Scrub Scrubber
	// OnHold, when set, is told of a hold (for a log line).
	OnHold func(key string, d time.Duration)
}

// Do runs fn for the chat key ("" for calls that are not to a chat: no pacing, no hold).
func (s *Sender) Do(ctx context.Context, key string, fn func(ctx context.Context) error) error {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	err := pace.Do(ctx, s.Policy, func(ctx context.Context) error {
		if key != "" && s.Pacer != nil {
			if err := s.Pacer.Wait(ctx, key); err != nil {
				return err
			}
		}
		actx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		err := fn(actx)
		if err != nil && s.Classify != nil {
			err = s.Classify(err)
		}
		if d, ok := pace.RetryAfterOf(err); ok && key != "" && s.Pacer != nil {
			s.Pacer.Hold(key, d)
			if s.OnHold != nil {
				s.OnHold(key, d)
			}
		}
		return err
	})
	return s.Scrub.Wrap(err)
}

// Held reports whether a rate limit still holds key: optional sends (a streaming preview,
// a typing action) skip their turn rather than queue behind the hold.
func (s *Sender) Held(key string) bool {
	return s.Pacer != nil && !s.Pacer.HeldUntil(key).IsZero()
}
