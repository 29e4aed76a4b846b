package channels

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSleepEndsWithTheContext(t *testing.T) {
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep with a live context did not sleep the whole time")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep with a cancelled context reported a full sleep")
	}
}

func TestAwaitIsBoundedByTheContext(t *testing.T) {
	ran := false
	if err := Await(context.Background(), func() { ran = true }); err != nil || !ran {
		t.Fatalf("Await = %v, ran %v; want nil after fn ran", err, ran)
	}
	release := make(chan struct{})
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Await(ctx, func() { <-release }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Await on a blocked fn = %v; want the context's error", err)
	}
}
