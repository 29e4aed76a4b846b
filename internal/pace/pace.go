// Package pace spaces outbound sends to a platform's limits and retries failed sends,
// honouring the wait the platform asks for. Every adapter puts one Pacer in front of every
// send and wraps each send in Do.
package pace

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limits of one platform.
type Limits struct {
	Global      rate.Limit // sends per second for the whole bot (0: unlimited)
	GlobalBurst int
	PerKey      rate.Limit // sends per second per chat (0: unlimited)
	PerKeyBurst int
	MaxKeys     int // bound on remembered chats (default 10,000)
}

// Pacer waits for a send slot overall and per chat. Safe for concurrent use.
type Pacer struct {
	lim    Limits
	global *rate.Limiter

	mu   sync.Mutex
	keys map[string]*keyLimiter
}

type keyLimiter struct {
	lim  *rate.Limiter
	used time.Time
}

// New returns a pacer for lim.
func New(lim Limits) *Pacer {
	if lim.MaxKeys <= 0 {
		lim.MaxKeys = 10_000
	}
	p := &Pacer{lim: lim, keys: make(map[string]*keyLimiter)}
	if lim.Global > 0 {
		p.global = rate.NewLimiter(lim.Global, max(lim.GlobalBurst, 1))
	}
	return p
}

// Wait blocks until a send to key may go, or ctx is done.
func (p *Pacer) Wait(ctx context.Context, key string) error {
	if l := p.keyLimiter(key); l != nil {
		if err := l.Wait(ctx); err != nil {
			return err
		}
	}
	if p.global != nil {
		return p.global.Wait(ctx)
	}
	return nil
}

func (p *Pacer) keyLimiter(key string) *rate.Limiter {
	if p.lim.PerKey <= 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if k, ok := p.keys[key]; ok {
		k.used = now
		return k.lim
	}
	if len(p.keys) >= p.lim.MaxKeys {
		p.evict()
	}
	k := &keyLimiter{lim: rate.NewLimiter(p.lim.PerKey, max(p.lim.PerKeyBurst, 1)), used: now}
	p.keys[key] = k
	return k.lim
}

// evict forgets the least recently used chat; its limiter is refilled by now in practice.
func (p *Pacer) evict() {
	var oldest string
	var when time.Time
	for k, v := range p.keys {
		if oldest == "" || v.used.Before(when) {
			oldest, when = k, v.used
		}
	}
	delete(p.keys, oldest)
}

// Policy bounds retries.
type Policy struct {
	Attempts int           // total attempts, first included (default 4)
	Base     time.Duration // first backoff (default 500ms), doubled each time, with jitter
	Max      time.Duration // cap on one backoff and on an honoured retry-after (default 60s)
}

func (p Policy) withDefaults() Policy {
	if p.Attempts <= 0 {
		p.Attempts = 4
	}
	if p.Base <= 0 {
		p.Base = 500 * time.Millisecond
	}
	if p.Max <= 0 {
		p.Max = 60 * time.Second
	}
	return p
}

// retryError marks an error as worth another attempt, optionally after a given wait.
type retryError struct {
	err   error
	after time.Duration
}

func (e *retryError) Error() string { return e.err.Error() }
func (e *retryError) Unwrap() error { return e.err }

// RetryAfter marks err as a rate limit: retry after d (the platform's retry_after).
func RetryAfter(err error, d time.Duration) error {
	return &retryError{err: err, after: max(d, time.Millisecond)}
}

// Transient marks err as worth retrying with backoff (5xx, network errors).
func Transient(err error) error { return &retryError{err: err} }

// ErrRetryTooLong is returned when the platform asks for a wait longer than Policy.Max.
var ErrRetryTooLong = errors.New("the platform asked to wait longer than the retry limit")

// Do calls fn until it succeeds, returns an error not marked by RetryAfter/Transient, or
// the attempts run out. A retry_after wait is honoured in full; it does not shorten.
// The returned error is the last one, unwrapped from its retry mark.
func Do(ctx context.Context, pol Policy, fn func(ctx context.Context) error) error {
	pol = pol.withDefaults()
	backoff := pol.Base
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		var re *retryError
		if !errors.As(err, &re) {
			return err
		}
		if attempt >= pol.Attempts {
			return re.err
		}
		wait := re.after
		if wait == 0 {
			wait = backoff/2 + rand.N(backoff/2+1)
			backoff = min(backoff*2, pol.Max)
		} else if wait > pol.Max {
			return errors.Join(ErrRetryTooLong, re.err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(ctx.Err(), re.err)
		case <-t.C:
		}
	}
}
