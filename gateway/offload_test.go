package gateway

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// The offload is bounded: a full queue refuses without blocking, close cancels what still
// runs past its deadline and waits for it, and nothing is taken after close.
func TestOffloadIsBoundedAndStops(t *testing.T) {
	o := newOffload(1, 1)
	running := make(chan struct{}, 2)
	var ran, cancelled atomic.Int32
	job := func(ctx context.Context) {
		ran.Add(1)
		running <- struct{}{}
		<-ctx.Done() // a hook that runs until it is cut
		cancelled.Add(1)
	}
	if !o.submit(job) {
		t.Fatal("the first job was refused")
	}
	<-running
	if !o.submit(job) {
		t.Fatal("the job for the one queue slot was refused")
	}
	start := time.Now()
	if o.submit(job) {
		t.Fatal("a job past the queue's bound was taken")
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("a refused submit took %s", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	o.close(ctx)
	if ran.Load() != 2 || cancelled.Load() != 2 {
		t.Fatalf("ran %d, cancelled %d; want both taken jobs run and cut at close's deadline", ran.Load(), cancelled.Load())
	}
	if o.submit(func(context.Context) {}) {
		t.Fatal("a job was taken after close")
	}
	o.do(context.Background(), func(context.Context) { t.Error("do ran a job after close") })
	o.close(context.Background()) // idempotent
}
