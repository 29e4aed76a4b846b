package channels

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLifecycleStopWaitsForEveryGoroutine(t *testing.T) {
	l := NewLifecycle("test")
	ctx, err := l.Begin()
	if err != nil {
		t.Fatal(err)
	}
	var ended atomic.Int32
	for range 5 {
		l.Go(func(ctx context.Context) {
			<-ctx.Done()
			ended.Add(1)
		})
	}
	stopped, err := l.Stop(context.Background())
	if err != nil || !stopped {
		t.Fatalf("Stop = %v, %v", stopped, err)
	}
	if ended.Load() != 5 || ctx.Err() == nil {
		t.Fatalf("Stop returned with %d of 5 goroutines ended (run ctx err %v)", ended.Load(), ctx.Err())
	}
	if l.Go(func(context.Context) { t.Error("ran after Stop") }) {
		t.Fatal("Go after Stop reported true")
	}
	if stopped, _ := l.Stop(context.Background()); stopped {
		t.Fatal("a second Stop reported stopping a running channel")
	}
	if _, err := l.Begin(); !errors.Is(err, ErrStopped) {
		t.Fatalf("Begin after Stop = %v; want ErrStopped", err)
	}
}

func TestLifecycleStartTwiceIsAnError(t *testing.T) {
	l := NewLifecycle("test")
	if _, err := l.Begin(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Begin(); err == nil {
		t.Fatal("second Begin succeeded")
	}
	_, _ = l.Stop(context.Background())
}

// A Start whose connect fails leaves no goroutine behind, and Stop after it is a no-op.
func TestLifecycleSetupFailure(t *testing.T) {
	l := NewLifecycle("test")
	if _, err := l.Begin(); err != nil {
		t.Fatal(err)
	}
	var ended atomic.Bool
	l.Go(func(ctx context.Context) { <-ctx.Done(); ended.Store(true) })
	l.Fail()
	if !ended.Load() {
		t.Fatal("Fail returned before the started goroutine ended")
	}
	if stopped, err := l.Stop(context.Background()); stopped || err != nil {
		t.Fatalf("Stop after Fail = %v, %v", stopped, err)
	}
}

// A Start that failed may be tried again: the channel starts afresh, with a live run
// context, and Stop then stops it.
func TestLifecycleStartAgainAfterFail(t *testing.T) {
	l := NewLifecycle("test")
	if _, err := l.Begin(); err != nil {
		t.Fatal(err)
	}
	l.Fail()
	ctx, err := l.Begin()
	if err != nil {
		t.Fatalf("Begin after Fail = %v; want a fresh start", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the second start's run context is already cancelled")
	}
	ran := make(chan struct{})
	if !l.Go(func(ctx context.Context) { close(ran); <-ctx.Done() }) {
		t.Fatal("Go refused after a second Begin")
	}
	<-ran
	if stopped, err := l.Stop(context.Background()); !stopped || err != nil {
		t.Fatalf("Stop = %v, %v; want the running channel stopped", stopped, err)
	}
	if _, err := l.Begin(); !errors.Is(err, ErrStopped) || !errors.Is(err, ErrPermanent) {
		t.Fatalf("Begin after Stop = %v; want a permanent ErrStopped", err)
	}
}

// Permanent keeps the error's text and chain, and marks it for errors.Is.
func TestPermanentKeepsTheError(t *testing.T) {
	base := errors.New("discord: the bot token was rejected")
	err := fmt.Errorf("channel discord: %w", Permanent(base))
	if !errors.Is(err, ErrPermanent) || !errors.Is(err, base) {
		t.Fatalf("%v: Is(ErrPermanent)=%v Is(base)=%v", err, errors.Is(err, ErrPermanent), errors.Is(err, base))
	}
	if err.Error() != "channel discord: discord: the bot token was rejected" {
		t.Fatalf("text %q", err.Error())
	}
	if Permanent(nil) != nil || errors.Is(errors.New("timeout"), ErrPermanent) {
		t.Fatal("nil or an unmarked error reads as permanent")
	}
}

// Concurrent Begin and Stop never deadlock, and exactly one Stop reports the running channel.
func TestLifecycleConcurrentStartStop(t *testing.T) {
	for range 50 {
		l := NewLifecycle("test")
		var wg sync.WaitGroup
		var stops atomic.Int32
		wg.Add(4)
		go func() {
			defer wg.Done()
			if _, err := l.Begin(); err == nil {
				l.Go(func(ctx context.Context) { <-ctx.Done() })
			}
		}()
		for range 3 {
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if stopped, err := l.Stop(ctx); err != nil {
					t.Error(err)
				} else if stopped {
					stops.Add(1)
				}
			}()
		}
		wg.Wait()
		_, _ = l.Stop(context.Background()) // a Begin that won the race is stopped here
		if stops.Load() > 1 {
			t.Fatalf("%d Stops reported stopping the channel", stops.Load())
		}
	}
}

// Stop is bounded by its context when a goroutine will not end.
func TestLifecycleStopIsBounded(t *testing.T) {
	l := NewLifecycle("test")
	if _, err := l.Begin(); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	l.Go(func(context.Context) { <-release })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop with a stuck goroutine = %v; want the deadline", err)
	}
	close(release)
	if _, err := l.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}
