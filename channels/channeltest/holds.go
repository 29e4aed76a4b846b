package channeltest

import (
	"context"
	"slices"
	"sync"

	"gateway/channels"
)

// Holds is a channels.Holder shared by the test's processes, one at a time, as cluster.Holder gives
// it through a lease. A hold lost or given up goes to the process that waited longest,
// unless the test paused the hand-over (nobody holds it meanwhile, as while a dead
// holder's lease has not yet expired).
type Holds struct {
	mu      sync.Mutex
	owner   string
	cancel  context.CancelFunc
	waiting []waiter
	asked   map[string]int
	paused  bool
}

type waiter struct {
	who   string
	given chan struct{}
}

// NewHolds makes a hold nobody holds yet.
func NewHolds() *Holds { return &Holds{asked: map[string]int{}} }

type holdsAs struct {
	h   *Holds
	who string
}

// As is the Holder of the process who.
func (h *Holds) As(who string) channels.Holder { return holdsAs{h, who} }

func (p holdsAs) Hold(ctx context.Context, name string) (context.Context, func(), error) {
	h := p.h
	h.mu.Lock()
	h.asked[p.who]++
	if h.owner == "" && !h.paused {
		h.owner = p.who
		held := h.give(ctx)
		h.mu.Unlock()
		return held, func() { h.Lose(p.who) }, nil
	}
	w := waiter{p.who, make(chan struct{})}
	h.waiting = append(h.waiting, w)
	h.mu.Unlock()
	select {
	case <-w.given:
		h.mu.Lock()
		held := h.give(ctx)
		h.mu.Unlock()
		return held, func() { h.Lose(p.who) }, nil
	case <-ctx.Done():
		h.mu.Lock()
		defer h.mu.Unlock()
		select {
		case <-w.given: // given meanwhile: hand it on
			h.owner = ""
			h.next()
		default:
			h.waiting = slices.DeleteFunc(h.waiting, func(x waiter) bool { return x.given == w.given })
		}
		return nil, func() {}, ctx.Err()
	}
}

// give makes the owner's held context; h.mu is held.
func (h *Holds) give(ctx context.Context) context.Context {
	held, cancel := context.WithCancel(ctx)
	h.cancel = cancel
	return held
}

// next hands a free hold to the longest waiter, unless paused; h.mu is held.
func (h *Holds) next() {
	if len(h.waiting) > 0 && !h.paused {
		w := h.waiting[0]
		h.waiting = h.waiting[1:]
		h.owner = w.who
		h.cancel = func() {}
		close(w.given)
	}
}

// Lose ends who's hold, if it has it (a lease lost, or released).
func (h *Holds) Lose(who string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.owner != who {
		return
	}
	h.cancel()
	h.owner = ""
	h.next()
}

// Pause stops (true) or resumes (false) handing a free hold on.
func (h *Holds) Pause(p bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.paused = p
	if !p && h.owner == "" {
		h.next()
	}
}

// Owner is who holds it now ("" for nobody).
func (h *Holds) Owner() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.owner
}

// AskedBy is how many times who asked for the hold.
func (h *Holds) AskedBy(who string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.asked[who]
}

// Waiting reports whether who waits for the hold.
func (h *Holds) Waiting(who string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.ContainsFunc(h.waiting, func(w waiter) bool { return w.who == who })
}
