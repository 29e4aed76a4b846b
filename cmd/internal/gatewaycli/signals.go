package gatewaycli

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Signals is the context cmd/gateway runs under: the first SIGINT or SIGTERM ends it, and
// the gateway drains (turns finish, answers go out, for up to about a minute). A second
// one ends the process at once, by the signal's default action, as an admin pressing
// Ctrl-C twice or a supervisor that cannot wait expects: nothing is lost by it, since the
// messages the drain had not answered are in the intake journal and answered after the
// next start, like after a crash.
func Signals() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop) // signals no longer caught: the next one has its default action
	return ctx, stop
}
