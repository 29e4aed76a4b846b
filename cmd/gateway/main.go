// Command gateway connects an LLM agent to Telegram, Discord, Slack and a local web chat.
package main

import (
	"os"
	"os/signal"
	"syscall"

	"gateway/cmd/internal/gatewaycli"
)

// main handles signals and nothing else: SIGINT/SIGTERM end the context (a second one the
// process, see gatewaycli.Signals), SIGHUP asks for a reload.
func main() {
	ctx, stop := gatewaycli.Signals()
	defer stop()
	// SIGHUP asks for a reload; the one-slot channel coalesces bursts.
	reload := make(chan struct{}, 1)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-hup:
				select {
				case reload <- struct{}{}:
				default:
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	code := gatewaycli.Run(ctx, reload, os.Args[1:], os.Stdout, os.Stderr, os.Environ())
	stop()
	os.Exit(code)
}
