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

// Pacer waits for a send slot overall and per chat. It also keeps per-chat holds: after a
// platform answered 429 with retry_after for a chat, Hold makes every later Wait for that
// chat (from any send path) wait until the platform's time has passed. Safe for concurrent use.
type Pacer struct {
	lim    Limits
	global *rate.Limiter

	mu   sync.Mutex
	keys map[string]*keyLimiter
}

type keyLimiter struct {
	lim   *rate.Limiter // nil when there is no per-key rate
	until time.Time     // nothing goes to this key before then (a platform's retry_after)
	used  time.Time
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

// ErrHeld is returned by Wait when ctx ends before a hold on the key would.
var ErrHeld = errors.New("the platform asked to wait before sending here again")

// Wait blocks until a send to key may go, or ctx is done. Like rate.Limiter.Wait, it
// returns at once with an error when ctx's deadline comes before the slot would.
func (p *Pacer) Wait(ctx context.Context, key string) error {
	lim, until := p.keyState(key)
	if d := time.Until(until); d > 0 {
		if dl, ok := ctx.Deadline(); ok && dl.Before(until) {
			return ErrHeld
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	if lim != nil {
		if err := lim.Wait(ctx); err != nil {
			return err
		}
	}
	if p.global != nil {
		return p.global.Wait(ctx)
	}
	return nil
}

// Hold makes nothing go to key for d (the platform's retry_after), whichever send path
// asks next. A longer hold already in place stays.
func (p *Pacer) Hold(key string, d time.Duration) {
	if d <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	k := p.entryLocked(key, time.Now())
	k.until = later(k.until, time.Now().Add(d))
}

// HeldUntil is when a hold on key ends; the zero time when there is none.
func (p *Pacer) HeldUntil(key string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k, ok := p.keys[key]; ok && time.Now().Before(k.until) {
		return k.until
	}
	return time.Time{}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// keyState returns key's limiter (nil when there is no per-key rate) and its hold.
func (p *Pacer) keyState(key string) (*rate.Limiter, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.lim.PerKey <= 0 {
		// Only holds are kept; a key without one costs nothing.
		if k, ok := p.keys[key]; ok {
			k.used = now
			return nil, k.until
		}
		return nil, time.Time{}
	}
	k := p.entryLocked(key, now)
	return k.lim, k.until
}

// entryLocked finds or makes key's entry; p.mu is held.
func (p *Pacer) entryLocked(key string, now time.Time) *keyLimiter {
	if k, ok := p.keys[key]; ok {
		k.used = now
		return k
	}
	if len(p.keys) >= p.lim.MaxKeys {
		p.evict(now)
	}
	k := &keyLimiter{used: now}
	if p.lim.PerKey > 0 {
		k.lim = rate.NewLimiter(p.lim.PerKey, max(p.lim.PerKeyBurst, 1))
	}
	p.keys[key] = k
	return k
}

// evict forgets the least recently used chat that is not held; its limiter is refilled by
// now in practice. When every chat is held, the oldest goes anyway: memory stays bounded.
func (p *Pacer) evict(now time.Time) {
	var oldest string
	var when time.Time
	held := true
	for k, v := range p.keys {
		free := !now.Before(v.until)
		if oldest == "" || (free && held) || (free == !held && v.used.Before(when)) {
			oldest, when, held = k, v.used, !free
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

// ErrGaveUp is in the error of a call that kept failing for a reason worth another try (a
// 5xx, the network, a rate limit) until its attempts or its context ran out: unlike a
// refusal, the platform may well take it later.
var ErrGaveUp = errors.New("gave up after retrying")

// gaveUpError is the last error of a call Do gave up on; errors.Is finds ErrGaveUp in it.
type gaveUpError struct{ err error }

func (e *gaveUpError) Error() string   { return e.err.Error() }
func (e *gaveUpError) Unwrap() []error { return []error{e.err, ErrGaveUp} }

// Do calls fn until it succeeds, returns an error not marked by RetryAfter/Transient, or
// the attempts run out. A retry_after wait is honoured in full; it does not shorten.
// The returned error is the last one, unwrapped from its retry mark; when Do gave up on a
// retryable one, errors.Is(err, ErrGaveUp) holds too.
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
			return &gaveUpError{re.err}
		}
		wait := re.after
		if wait == 0 {
			wait = backoff/2 + rand.N(backoff/2+1)
			backoff = min(backoff*2, pol.Max)
		} else if wait > pol.Max {
			return &gaveUpError{errors.Join(ErrRetryTooLong, re.err)}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return &gaveUpError{errors.Join(ctx.Err(), re.err)}
		case <-t.C:
		}
	}
}

// RetryAfterOf reports the wait a rate-limit error asked for (see RetryAfter).
func RetryAfterOf(err error) (time.Duration, bool) {
	var re *retryError
	if errors.As(err, &re) && re.after > 0 {
		return re.after, true
	}
	return 0, false
}
