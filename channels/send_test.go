package channels

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gateway/internal/pace"
)

var errLimited = errors.New("429 from bot SECRET-TOKEN")

// A 429 on one send holds every later send to that chat for retry_after, and the send is
// retried after it; other chats are not held.
func TestSenderHoldsTheChatAfterARateLimit(t *testing.T) {
	s := &Sender{
		Pacer:  pace.New(pace.Limits{}),
		Policy: pace.Policy{Attempts: 3, Base: time.Millisecond},
		Classify: func(err error) error {
			if errors.Is(err, errLimited) {
				return pace.RetryAfter(err, 300*time.Millisecond)
			}
			return err
		},
		Scrub: NewScrubber("SECRET-TOKEN"),
	}
	var attempts atomic.Int32
	var first, second time.Time
	err := s.Do(context.Background(), "chat1", func(context.Context) error {
		if attempts.Add(1) == 1 {
			first = time.Now()
			return errLimited
		}
		second = time.Now()
		return nil
	})
	if err != nil || attempts.Load() != 2 {
		t.Fatalf("Do = %v after %d attempts; want success on the second", err, attempts.Load())
	}
	if second.Sub(first) < 300*time.Millisecond {
		t.Fatalf("retried %v after a 429 asking for 300ms", second.Sub(first))
	}
	// Now a hold from another path: the next send to chat1 waits, chat2 does not.
	_ = s.Do(context.Background(), "chat1", func(context.Context) error {
		return errors.Join(errLimited) // one more 429 arms the hold again
	})
	if !s.Held("chat1") || s.Held("chat2") {
		t.Fatalf("held: chat1 %v chat2 %v", s.Held("chat1"), s.Held("chat2"))
	}
}

func TestSenderScrubsTheFinalError(t *testing.T) {
	s := &Sender{Policy: pace.Policy{Attempts: 1}, Scrub: NewScrubber("SECRET-TOKEN")}
	err := s.Do(context.Background(), "", func(context.Context) error { return errLimited })
	if err == nil || strings.Contains(err.Error(), "SECRET-TOKEN") {
		t.Fatalf("final error %v", err)
	}
}
