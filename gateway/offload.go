package gateway

import (
	"context"
	"sync"
)

// offload runs work handed over by goroutines that must not wait (an adapter's intake or
// reconnect loop) on goroutines the Gateway owns. It is bounded: a fixed number of
// workers, started with the first job, and a queue of fixed size. submit never blocks: a
// job that finds the queue full or the offload closed is refused, and the caller logs
// what is lost. close runs the queued jobs, cancelling them past its deadline, and waits
// for the workers to end.
type offload struct {
	workers int
	jobs    chan func(context.Context)
	ctx     context.Context // given to every job; cancelled by close past its deadline
	cancel  context.CancelFunc
	quit    chan struct{} // closed by close: workers run what is queued, then end
	ended   chan struct{} // closed when every worker has ended

	mu      sync.Mutex
	started bool
	closed  bool
	wg      sync.WaitGroup
}

func newOffload(workers, size int) *offload {
	ctx, cancel := context.WithCancel(context.Background())
	return &offload{workers: workers, jobs: make(chan func(context.Context), size), ctx: ctx, cancel: cancel,
		quit: make(chan struct{}), ended: make(chan struct{})}
}

// submit queues job; it reports false, without blocking, when the queue is full or closed.
func (o *offload) submit(job func(context.Context)) bool {
	o.mu.Lock() // held over the send, so a job accepted is never behind close's drain
	defer o.mu.Unlock()
	if !o.startLocked() {
		return false
	}
	select {
	case o.jobs <- job:
		return true
	default:
		return false
	}
}

// do queues job, waiting for room, and returns once it ran or ctx ended. For callers that
// may wait (Start, Stop) and need their job ordered after the ones already queued.
func (o *offload) do(ctx context.Context, job func(context.Context)) {
	if !o.start() {
		return
	}
	done := make(chan struct{})
	select {
	case o.jobs <- func(ctx context.Context) { defer close(done); job(ctx) }:
	case <-ctx.Done():
		return
	case <-o.quit:
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	case <-o.ended: // closed before a worker took it
	}
}

// start starts the workers on first use; it reports false once the offload is closed.
func (o *offload) start() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.startLocked()
}

func (o *offload) startLocked() bool {
	if o.closed {
		return false
	}
	if !o.started {
		o.started = true
		for range o.workers {
			o.wg.Go(o.work)
		}
	}
	return true
}

func (o *offload) work() {
	for {
		select {
		case job := <-o.jobs:
			job(o.ctx)
		case <-o.quit:
			for {
				select {
				case job := <-o.jobs:
					job(o.ctx)
				default:
					return
				}
			}
		}
	}
}

// close refuses new jobs and waits until the queued ones ran. When ctx ends first, the
// jobs still running or queued get a cancelled context (a hook call or a send then returns
// at once), and close waits for the workers to end. It is idempotent.
func (o *offload) close(ctx context.Context) {
	o.mu.Lock()
	first := !o.closed
	o.closed = true
	o.mu.Unlock()
	if !first {
		<-o.ended
		return
	}
	close(o.quit)
	go func() { o.wg.Wait(); close(o.ended) }()
	select {
	case <-o.ended:
	case <-ctx.Done():
		o.cancel()
		<-o.ended
	}
	o.cancel()
}
