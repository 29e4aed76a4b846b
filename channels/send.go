package channels

import (
	"context"
	"errors"
	"time"

	"gateway/internal/pace"
)

// Sender is the paced send with retry every adapter puts in front of its platform calls:
// it waits for the chat's (and the bot's) send slot, bounds each attempt by Timeout, and
// retries what Classify marks retryable under Policy. A rate limit (pace.RetryAfter) holds
// the chat for the platform's retry_after, so that every later send to it — a streaming
// edit, the final text, a split part, a voice note, typing — waits too, not only this one.
//
// A Sender holds no state of its own: copies share the pacers, so their slots and holds.
type Sender struct {
	Pacer *pace.Pacer // nil: no pacing and no holds
	// Global, when set, is the bot's slot, shared by Senders whose chats are paced apart
	// (Telegram's private chats and groups): a send to a chat waits for it after the chat's.
	Global *pace.Pacer
	// Shared, when set, is the bot's rate across processes (cluster mode): a send to a chat
	// takes it after the bot's slot in this process, so that the local pacer, not the shared
	// one, absorbs this process's own bursts.
	Shared   Budget
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
	err := pace.Do(ctx, s.Policy, func(ctx context.Context) error {
		if key != "" && s.Pacer != nil {
			if err := s.Pacer.Wait(ctx, key); err != nil {
				return err
			}
		}
		if key != "" && s.Global != nil {
			if err := s.Global.Wait(ctx, ""); err != nil {
				return err
			}
		}
		if key != "" && s.Shared != nil {
			if err := s.Shared.Take(ctx); err != nil {
				return err
			}
		}
		return s.attempt(ctx, key, fn)
	})
	return s.Scrub.Wrap(err, pace.ErrGaveUp, ErrNoChat)
}

// ErrSkipped is returned by Try when an optional send skipped its turn.
var ErrSkipped = errors.New("optional send skipped: the chat is held or has no free send slot")

// Try is Do for an optional send — a streaming preview, a typing action — that skips its
// turn rather than wait: it returns ErrSkipped at once while key is held or when no send
// slot is free now, and otherwise makes one attempt, a rate limit holding key as in Do.
// The bot's slots (Global, then Shared) are taken before the chat's, so that a skip for want
// of the bot's leaves the chat's slot to the send that matters. With chatSlot false only the
// bot's are taken: the send does not count against the chat's rate.
func (s *Sender) Try(ctx context.Context, key string, chatSlot bool, fn func(ctx context.Context) error) error {
	if key != "" && s.Held(key) {
		return ErrSkipped
	}
	if !s.free(ctx, key, chatSlot) {
		return ErrSkipped
	}
	err := pace.Do(ctx, pace.Policy{Attempts: 1}, func(ctx context.Context) error {
		return s.attempt(ctx, key, fn)
	})
	return s.Scrub.Wrap(err, pace.ErrGaveUp, ErrNoChat)
}

// free takes the send slots Try needs if they are free now (within a few milliseconds).
func (s *Sender) free(ctx context.Context, key string, chatSlot bool) bool {
	if key == "" {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if s.Global != nil && s.Global.Wait(ctx, "") != nil {
		return false
	}
	if s.Shared != nil && s.Shared.Take(ctx) != nil {
		return false
	}
	return !chatSlot || s.Pacer == nil || s.Pacer.Wait(ctx, key) == nil
}

// attempt makes one call of fn, bounded by Timeout, classified, a rate limit holding key.
func (s *Sender) attempt(ctx context.Context, key string, fn func(ctx context.Context) error) error {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
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
}

// Held reports whether a rate limit still holds key: optional sends (a streaming preview,
// a typing action) skip their turn rather than queue behind the hold.
func (s *Sender) Held(key string) bool {
	return s.Pacer != nil && !s.Pacer.HeldUntil(key).IsZero()
}
