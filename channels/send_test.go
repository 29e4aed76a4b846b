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

// An optional send skips its turn at once while the chat is held, and a rate limit it
// meets holds the chat for every later send; one attempt only.
func TestSenderTrySkipsAHeldChat(t *testing.T) {
	s := &Sender{
		Pacer:  pace.New(pace.Limits{}),
		Policy: pace.Policy{Attempts: 3, Base: time.Millisecond},
		Classify: func(err error) error {
			return pace.RetryAfter(err, time.Minute)
		},
		Scrub: NewScrubber("SECRET-TOKEN"),
	}
	var calls atomic.Int32
	err := s.Try(context.Background(), "chat1", true, func(context.Context) error {
		calls.Add(1)
		return errLimited
	})
	if err == nil || errors.Is(err, ErrSkipped) || strings.Contains(err.Error(), "SECRET-TOKEN") || calls.Load() != 1 {
		t.Fatalf("Try = %v after %d calls; want the scrubbed 429 after one", err, calls.Load())
	}
	if !s.Held("chat1") {
		t.Fatal("a 429 met by an optional send does not hold the chat")
	}
	start := time.Now()
	err = s.Try(context.Background(), "chat1", true, func(context.Context) error {
		calls.Add(1)
		return nil
	})
	if !errors.Is(err, ErrSkipped) || calls.Load() != 1 || time.Since(start) > time.Second {
		t.Fatalf("Try on a held chat = %v (%d calls, %v); want ErrSkipped at once", err, calls.Load(), time.Since(start))
	}
	if err := s.Try(context.Background(), "chat2", true, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Try on another chat = %v", err)
	}
}

// Two Senders pacing their chats apart share the bot's slot (Global); an optional send
// that finds the bot's slot taken skips without using up the chat's.
func TestSenderGlobalSlotIsShared(t *testing.T) {
	global := pace.New(pace.Limits{Global: 1, GlobalBurst: 1})
	perChat := pace.New(pace.Limits{PerKey: 1.0 / 60, PerKeyBurst: 1})
	dms := &Sender{Pacer: perChat, Global: global}
	groups := &Sender{Pacer: pace.New(pace.Limits{}), Global: global}
	nop := func(context.Context) error { return nil }
	if err := groups.Do(context.Background(), "-5", nop); err != nil {
		t.Fatal(err)
	}
	// The bot's one slot of this second is gone: the DM's optional send skips...
	if err := dms.Try(context.Background(), "7", true, nop); !errors.Is(err, ErrSkipped) {
		t.Fatalf("Try with the bot's slot taken = %v; want ErrSkipped", err)
	}
	// ...and the chat's slot (one a minute) is still there for the send that matters.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := dms.Do(ctx, "7", nop); err != nil {
		t.Fatalf("Do after a skipped Try = %v; the chat's slot was used up", err)
	}
}

// budget is a shared budget of n sends that then blocks until ctx ends, as a Budget whose
// other processes spent the bot's rate does.
type budget struct {
	left  atomic.Int32
	takes atomic.Int32
}

func (b *budget) Take(ctx context.Context) error {
	b.takes.Add(1)
	if b.left.Add(-1) >= 0 {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

// In cluster mode the bot's rate is shared: a send to a chat takes the shared budget (each
// attempt, a retry too), and waits for it when it is spent; calls not to a chat do not.
func TestSenderTakesTheSharedBudgetForChatSends(t *testing.T) {
	b := &budget{}
	b.left.Store(2)
	s := &Sender{Pacer: pace.New(pace.Limits{}), Shared: b, Policy: pace.Policy{Attempts: 3, Base: time.Millisecond},
		Classify: func(err error) error { return pace.Transient(err) }}
	var calls atomic.Int32
	err := s.Do(context.Background(), "chat1", func(context.Context) error {
		if calls.Add(1) == 1 {
			return errors.New("flaky")
		}
		return nil
	})
	if err != nil || calls.Load() != 2 || b.takes.Load() != 2 {
		t.Fatalf("Do = %v after %d attempts, %d takes; want success on the second, each taking the budget", err, calls.Load(), b.takes.Load())
	}
	if err := s.Do(context.Background(), "", func(context.Context) error { return nil }); err != nil || b.takes.Load() != 2 {
		t.Fatalf("a call not to a chat: %v, takes %d; want no take", err, b.takes.Load())
	}
	// Spent: the next chat send waits for the budget, until its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	sent := false
	err = s.Do(ctx, "chat2", func(context.Context) error { sent = true; return nil })
	if err == nil || sent {
		t.Fatalf("with the shared budget spent: Do = %v, sent %v; want it to wait and not send", err, sent)
	}
}

// An optional send skips its turn rather than wait for a spent shared budget.
func TestSenderTrySkipsWhenTheSharedBudgetIsSpent(t *testing.T) {
	b := &budget{}
	b.left.Store(1)
	s := &Sender{Pacer: pace.New(pace.Limits{}), Shared: b, Policy: pace.Policy{Attempts: 1}}
	var sent atomic.Int32
	send := func(context.Context) error { sent.Add(1); return nil }
	if err := s.Try(context.Background(), "chat1", true, send); err != nil {
		t.Fatalf("first optional send: %v", err)
	}
	start := time.Now()
	if err := s.Try(context.Background(), "chat1", false, send); !errors.Is(err, ErrSkipped) {
		t.Fatalf("optional send with the budget spent = %v; want ErrSkipped", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the skip took %v; it must not wait for the budget", d)
	}
	if sent.Load() != 1 || b.takes.Load() != 2 {
		t.Fatalf("sent %d, takes %d; want 1 sent and 2 takes", sent.Load(), b.takes.Load())
	}
}
