package channels

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Lifecycle is the start/stop state machine every adapter shares: new → running → stopped,
// never back from stopped; a Start that failed (Fail) goes back to new, to be tried again. It owns the run context handed to the adapter's goroutines and waits for them
// on Stop. The zero value is not usable; make one with NewLifecycle.
//
// An adapter calls Begin at the top of Start, Fail when connecting failed, Go for every
// goroutine it starts, Enter/Leave around work that Stop must wait for (an HTTP request it
// serves), and Stop from its own Stop.
type Lifecycle struct {
	name string

	mu     sync.Mutex
	state  int
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

const (
	lifeNew = iota
	lifeRunning
	lifeFailing // Fail waits for the goroutines of a failed Start; then new again
	lifeStopped
)

// ErrStopped is returned by Begin after Stop, and reported by Go and Enter once stopping.
var ErrStopped = errors.New("channel stopped")

// NewLifecycle makes the state machine of the channel called name (used in errors).
func NewLifecycle(name string) *Lifecycle {
	return &Lifecycle{name: name}
}

// Begin moves new → running and returns the run context, which ends at Stop. A second
// Begin, or one after Stop, is a permanent error: a stopped channel is not restarted, a new
// one is made. A Begin after Fail starts afresh.
func (l *Lifecycle) Begin() (context.Context, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case lifeRunning, lifeFailing:
		return nil, Permanent(fmt.Errorf("%s: Start called twice", l.name))
	case lifeStopped:
		return nil, Permanent(fmt.Errorf("%s: Start after Stop (make a new channel): %w", l.name, ErrStopped))
	}
	l.state = lifeRunning
	l.ctx, l.cancel = context.WithCancel(context.Background())
	return l.ctx, nil
}

// Fail ends a Start that could not connect: the run context is cancelled and the goroutines
// already started are waited for, so a failed Start leaves nothing behind, and the channel is
// new again (Start may be tried again), unless Stop came meanwhile.
func (l *Lifecycle) Fail() {
	l.mu.Lock()
	if l.state == lifeRunning {
		l.state = lifeFailing // Go and Enter refuse from now on
	}
	if l.cancel != nil {
		l.cancel()
	}
	l.mu.Unlock()
	l.wg.Wait()
	l.mu.Lock()
	if l.state == lifeFailing {
		l.state = lifeNew
	}
	l.mu.Unlock()
}

// Running reports whether Begin happened and Stop did not.
func (l *Lifecycle) Running() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == lifeRunning
}

// Context is the run context (nil before Begin); it ends at Stop.
func (l *Lifecycle) Context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ctx
}

// Go runs fn on a goroutine that Stop waits for; fn gets the run context. It reports false,
// and runs nothing, when the channel is not running.
func (l *Lifecycle) Go(fn func(ctx context.Context)) bool {
	ctx, ok := l.Enter()
	if !ok {
		return false
	}
	go func() {
		defer l.Leave()
		fn(ctx)
	}()
	return true
}

// Enter registers work that Stop must wait for (a webhook request being served) and returns
// the run context; false once stopping. Each true Enter needs one Leave.
func (l *Lifecycle) Enter() (context.Context, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != lifeRunning {
		return nil, false
	}
	l.wg.Add(1)
	return l.ctx, true
}

// Leave ends work registered by Enter.
func (l *Lifecycle) Leave() { l.wg.Done() }

// Stop moves to stopped, cancels the run context and waits for every goroutine started with
// Go (and every Enter) to end, or for ctx. It reports whether this call stopped a running
// channel, so the adapter reports the disconnect once. Stop is safe to call any number of
// times, concurrently, and before Begin.
func (l *Lifecycle) Stop(ctx context.Context) (stopped bool, err error) {
	l.mu.Lock()
	was := l.state
	l.state = lifeStopped
	if l.cancel != nil {
		l.cancel()
	}
	l.mu.Unlock()
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return was == lifeRunning, fmt.Errorf("%s: stop: %w", l.name, ctx.Err())
	}
	return was == lifeRunning, nil
}
