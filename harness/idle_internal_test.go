package harness

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// What derives from a model call's idle context (the transport's AfterFunc, a child
// context) waits on it without a goroutine each: 40 calls waiting on the model add none;
// the silence still reaches every one of them.
func TestIdleContextDerivativesParkNoGoroutine(t *testing.T) {
	const calls = 40
	before := runtime.NumGoroutine()
	fired := make(chan struct{}, calls)
	var children []context.Context
	var ends []func()
	for range calls {
		c, end := withIdle(context.Background(), 200*time.Millisecond)
		ends = append(ends, end)
		context.AfterFunc(c, func() { fired <- struct{}{} })
		child, cancel := context.WithCancel(c)
		defer cancel()
		children = append(children, child)
	}
	if n := runtime.NumGoroutine() - before; n > 0 {
		t.Errorf("%d goroutines more while %d calls wait; want none", n, calls)
	}
	for i := range calls {
		select {
		case <-fired:
		case <-time.After(10 * time.Second):
			t.Fatalf("after the silence %d of %d AfterFuncs ran", i, calls)
		}
	}
	for _, child := range children {
		select {
		case <-child.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("a child of a call ended by its silence was not cancelled")
		}
		if child.Err() == nil {
			t.Fatal("a cancelled child has no error")
		}
	}
	for _, end := range ends {
		end()
	}
	// An AfterFunc stopped before the end does not run.
	c, end := withIdle(context.Background(), time.Hour)
	ran := make(chan struct{})
	if stop := context.AfterFunc(c, func() { close(ran) }); !stop() {
		t.Fatal("stop of a waiting AfterFunc reported it had run")
	}
	end()
	select {
	case <-ran:
		t.Fatal("a stopped AfterFunc ran")
	case <-time.After(50 * time.Millisecond):
	}
}
