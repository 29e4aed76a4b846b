package harness

import (
	"context"
	"io"
	"sync"
	"time"
)

// idleContext bounds a model call by silence rather than by length: it is done when its
// parent is, or when no byte of the answer arrived for idle (before the answer starts, or
// between two pieces of it). Its Err is then context.DeadlineExceeded, as a call's own
// timeout is reported. A slow model streaming a long answer is thus not cut midway, while
// one that stopped sending is.
type idleContext struct {
	context.Context
	idle  time.Duration
	done  chan struct{}
	timer *time.Timer
	stop  func() bool // ends the watch on the parent

	mu       sync.Mutex
	err      error
	deadline time.Time
	after    map[int]func() // AfterFunc's, run once c is done
	nextID   int
}

// touchKey finds an idleContext's touch in a request's context (see touchBody).
type touchKey struct{}

// withIdle returns a context done after idle without touch, and its cancel, which must be
// called when the call ends.
func withIdle(parent context.Context, idle time.Duration) (*idleContext, func()) {
	c := &idleContext{Context: parent, idle: idle, done: make(chan struct{}), deadline: time.Now().Add(idle)}
	c.mu.Lock() // end, which either may call at once, waits for both to be set
	c.timer = time.AfterFunc(idle, func() { c.end(context.DeadlineExceeded) })
	c.stop = context.AfterFunc(parent, func() { c.end(parent.Err()) })
	c.mu.Unlock()
	return c, func() { c.end(context.Canceled) }
}

func (c *idleContext) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	c.timer.Stop()
	c.stop()
	close(c.done)
	for _, f := range c.after {
		go f()
	}
	c.after = nil
}

// AfterFunc runs f in its own goroutine once c is done, and its stop unregisters f. The
// context package uses it for what derives from c (the HTTP transport's context.AfterFunc
// of each call, a child's cancel); without it, each of them would park a goroutine of its
// own for as long as the model takes: one more for every turn waiting on the model.
func (c *idleContext) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		go f()
		return func() bool { return false }
	}
	if c.after == nil {
		c.after = map[int]func(){}
	}
	id := c.nextID
	c.nextID++
	c.after[id] = f
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.after[id]
		delete(c.after, id)
		return ok
	}
}

// touch says that the answer is still coming: the silence counts from now.
func (c *idleContext) touch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.timer.Reset(c.idle)
		c.deadline = time.Now().Add(c.idle)
	}
}

func (c *idleContext) Done() <-chan struct{} { return c.done }

func (c *idleContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Deadline is when the silence would end the call; a provider then adds no timeout of its own.
func (c *idleContext) Deadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline, true
}

func (c *idleContext) Value(key any) any {
	if key == (touchKey{}) {
		return c.touch
	}
	return c.Context.Value(key)
}

// touchBody is a streamed response body that touches its call's idleContext at each read
// that brought bytes.
type touchBody struct {
	io.ReadCloser
	touch func()
}

func (b touchBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.touch()
	}
	return n, err
}

// touching wraps body so that its reads touch ctx's idleContext, if it has one.
func touching(ctx context.Context, body io.ReadCloser) io.ReadCloser {
	if t, ok := ctx.Value(touchKey{}).(func()); ok {
		return touchBody{body, t}
	}
	return body
}
