package channels

import "context"

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
