package cluster

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"gateway/channels"
)

// Holder gives a connection a platform allows once per token (Telegram long polling) to one
// process at a time, through a lease on the Leases bucket: channels.Holder for the adapters.
type Holder struct {
	l      *Leases
	holder string
	log    *slog.Logger
}

var _ channels.Holder = (*Holder)(nil)

// NewHolder returns a Holder taking leases for holder (this process: hostname, pid, start
// time); log may be nil.
func NewHolder(l *Leases, holder string, log *slog.Logger) *Holder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Holder{l: l, holder: holder, log: log}
}

// Hold blocks until this process holds the lease name, trying every TTL/4, or ctx ends.
// held ends when the lease is lost (another took it, or it could not be renewed for TTL, so
// that another may have it by now) or ctx ends; release stops renewing and gives the lease
// up, and waits for the renewal to end. A holder that dies without release blocks name
// for TTL.
func (h *Holder) Hold(ctx context.Context, name string) (context.Context, func(), error) {
	every := h.l.TTL() / 4
	var lease *Lease
	failing := false // NATS away: told once, not every TTL/4
	for {
		var err error
		lease, err = h.acquire(ctx, name)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrLeaseHeld) && ctx.Err() == nil && !failing {
			h.log.Warn("cluster: cannot take a lease; retrying", "lease", name, "err", err)
		}
		failing = !errors.Is(err, ErrLeaseHeld)
		if !channels.Sleep(ctx, every) {
			return nil, func() {}, ctx.Err()
		}
	}
	held, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.renew(held, cancel, lease)
	}()
	var once sync.Once
	release := func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	return held, release, nil
}

func (h *Holder) acquire(ctx context.Context, name string) (*Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, max(h.l.TTL()/4, time.Second))
	defer cancel()
	return h.l.Acquire(ctx, name, h.holder)
}

// renew keeps lease until held ends, then releases it; it cancels held when the lease is
// lost. A renewal counts from before it was sent, and held ends once TTL passed since the
// last one that succeeded: no later than the lease can have expired in the bucket, so that
// two processes never both think they hold it.
func (h *Holder) renew(held context.Context, cancel context.CancelFunc, lease *Lease) {
	ttl := h.l.TTL()
	last := time.Now()
	next := last.Add(ttl / 4)
	timer := time.NewTimer(ttl / 4)
	defer timer.Stop()
	for {
		expiry := last.Add(ttl)
		timer.Reset(time.Until(minTime(next, expiry)))
		select {
		case <-held.Done():
			ctx, stop := context.WithTimeout(context.Background(), max(ttl/4, time.Second))
			if err := lease.Release(ctx); err != nil {
				h.log.Warn("cluster: cannot give a lease up; it expires by itself", "lease", lease.Name(), "err", err)
			}
			stop()
			return
		case <-timer.C:
		}
		sent := time.Now()
		if !sent.Before(expiry) {
			h.log.Warn("cluster: a lease could not be renewed in time; giving it up", "lease", lease.Name())
			cancel()
			return
		}
		ctx, stop := context.WithDeadline(held, minTime(sent.Add(ttl/4), expiry))
		err := lease.Renew(ctx)
		stop()
		switch {
		case err == nil:
			last, next = sent, sent.Add(ttl/4)
		case errors.Is(err, ErrLeaseLost):
			h.log.Warn("cluster: a lease was lost", "lease", lease.Name())
			cancel()
			return
		default:
			if held.Err() == nil {
				h.log.Warn("cluster: cannot renew a lease; retrying", "lease", lease.Name(), "err", err)
			}
			next = time.Now().Add(ttl / 8)
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
