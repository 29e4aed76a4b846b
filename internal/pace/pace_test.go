package pace

import (
	"context"
	"errors"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

func TestDoHonoursRetryAfterAndRetriesMoreThanOnce(t *testing.T) {
	var calls []time.Time
	err := Do(context.Background(), Policy{Attempts: 3}, func(context.Context) error {
		calls = append(calls, time.Now())
		if len(calls) < 3 {
			return RetryAfter(errors.New("429"), 200*time.Millisecond)
		}
		return nil
	})
	if err != nil || len(calls) != 3 {
		t.Fatalf("err=%v calls=%d; want success on the third attempt", err, len(calls))
	}
	for i := 1; i < len(calls); i++ {
		if gap := calls[i].Sub(calls[i-1]); gap < 200*time.Millisecond {
			t.Errorf("attempt %d came %v after the previous one; retry_after was 200ms", i+1, gap)
		}
	}
}

func TestDoStopsAtPermanentErrorAndAfterAttempts(t *testing.T) {
	n := 0
	perm := errors.New("400 bad request")
	if err := Do(context.Background(), Policy{}, func(context.Context) error { n++; return perm }); !errors.Is(err, perm) || errors.Is(err, ErrGaveUp) || n != 1 {
		t.Fatalf("permanent: err=%v calls=%d; want the error at once, not marked as given up", err, n)
	}
	n = 0
	tr := errors.New("502")
	err := Do(context.Background(), Policy{Attempts: 3, Base: time.Millisecond}, func(context.Context) error { n++; return Transient(tr) })
	if !errors.Is(err, tr) || !errors.Is(err, ErrGaveUp) || n != 3 {
		t.Fatalf("transient: err=%v calls=%d; want 3 attempts then the error, marked as given up", err, n)
	}
}

func TestDoGivesUpOnTooLongRetryAfter(t *testing.T) {
	err := Do(context.Background(), Policy{Max: time.Second}, func(context.Context) error {
		return RetryAfter(errors.New("429"), time.Hour)
	})
	if !errors.Is(err, ErrRetryTooLong) || !errors.Is(err, ErrGaveUp) {
		t.Fatalf("err = %v", err)
	}
}

func TestDoStopsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := Do(ctx, Policy{}, func(context.Context) error { return RetryAfter(errors.New("429"), 10*time.Second) })
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrGaveUp) {
		t.Fatalf("err = %v", err)
	}
}

func TestPacerSpacesSendsPerKeyAndBoundsKeys(t *testing.T) {
	p := New(Limits{PerKey: rate.Every(100 * time.Millisecond), PerKeyBurst: 1, MaxKeys: 2})
	ctx := context.Background()
	start := time.Now()
	for range 3 {
		if err := p.Wait(ctx, "chat"); err != nil {
			t.Fatal(err)
		}
	}
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Errorf("3 sends to one chat took %v; want at least 200ms at 10/s", el)
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		if err := p.Wait(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(p.keys); n > 2 {
		t.Errorf("pacer remembers %d chats; bound is 2", n)
	}
}

// A hold (a platform's retry_after for one chat) stops every later send to that chat until
// it passes, with or without a per-chat rate, and leaves other chats alone.
func TestHoldStopsSendsToThatChatOnly(t *testing.T) {
	for _, lim := range []Limits{{}, {PerKey: rate.Every(10 * time.Millisecond), PerKeyBurst: 1}} {
		p := New(lim)
		ctx := context.Background()
		start := time.Now()
		p.Hold("chat", 300*time.Millisecond)
		if err := p.Wait(ctx, "other"); err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el >= 300*time.Millisecond {
			t.Errorf("another chat waited %v for a hold that was not its own", el)
		}
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		if err := p.Wait(short, "chat"); err == nil {
			t.Errorf("a send that cannot wait went to a held chat")
		}
		cancel()
		if err := p.Wait(ctx, "chat"); err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el < 300*time.Millisecond {
			t.Errorf("a send went to the held chat after %v; the hold was 300ms", el)
		}
		if !p.HeldUntil("chat").IsZero() {
			t.Errorf("the hold is still reported after it passed")
		}
	}
}

// Forgetting chats to stay within MaxKeys forgets one that is not held first: a chat the
// platform told us to leave alone stays left alone.
func TestEvictionKeepsHeldChats(t *testing.T) {
	p := New(Limits{PerKey: rate.Every(time.Millisecond), PerKeyBurst: 1, MaxKeys: 2})
	p.Hold("held", time.Minute)
	for _, k := range []string{"b", "c", "d"} {
		if err := p.Wait(context.Background(), k); err != nil {
			t.Fatal(err)
		}
	}
	if p.HeldUntil("held").IsZero() {
		t.Errorf("the held chat was forgotten to make room for others")
	}
}
