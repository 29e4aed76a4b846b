package channels

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Budget is a send rate shared beyond this process: in cluster mode, Telegram's per-bot limit
// holds across every gateway process. Take blocks until one send may go, or ctx ends.
type Budget interface {
	Take(ctx context.Context) error
}

// Holder gives one process at a time a connection a platform allows once per token
// (Telegram long polling). Hold blocks until this process holds name or ctx ends; held ends
// when the hold is lost; release gives it up (idempotent).
type Holder interface {
	Hold(ctx context.Context, name string) (held context.Context, release func(), err error)
}

// holdWait is how long Hold may take before the log says the connection is held
// elsewhere: a free hold is taken within a round trip.
const holdWait = 2 * time.Second

// HeldWhere asks a Holder for a connection and tells in the log where that connection
// runs, as far as this process knows, once per change: Here once held, Elsewhere once
// let go or once a first Hold has waited a couple of seconds. Its zero value, with
// Holder, Log and the two lines set, is ready.
type HeldWhere struct {
	Holder          Holder
	Log             *slog.Logger
	Here, Elsewhere string // the log lines

	mu    sync.Mutex // orders the log lines as the changes they tell
	where int        // 0 unknown, 1 here, 2 elsewhere
}

// Hold asks the Holder for name (see Holder).
func (h *HeldWhere) Hold(ctx context.Context, name string) (context.Context, func(), error) {
	t := time.AfterFunc(holdWait, func() { h.move(2, true) })
	defer t.Stop()
	return h.Holder.Hold(ctx, name)
}

// Set tells the log the connection now runs here (true) or elsewhere.
func (h *HeldWhere) Set(here bool) {
	if here {
		h.move(1, false)
	} else {
		h.move(2, false)
	}
}

// move sets where (only if still unknown, with ifUnknown) and logs a change.
func (h *HeldWhere) move(where int, ifUnknown bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.where == where || ifUnknown && h.where != 0 {
		return
	}
	h.where = where
	if where == 1 {
		h.Log.Info(h.Here)
	} else {
		h.Log.Info(h.Elsewhere)
	}
}
