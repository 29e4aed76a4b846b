// Command gateway-bench measures the gateway on the Telegram path: throughput, latency, CPU
// and memory against the project's fake Bot API and a fake model. It is a separate binary so
// that `gateway` links no fake server and no load driver. See docs/bench.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == floorArg {
		if err := runFloor(ctx, os.Args[2:], os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "gateway-bench floor:", err)
			stop()
			os.Exit(1)
		}
		return
	}
	cmd := newBenchCmd(ctx, os.Stdout, os.Stderr)
	cmd.SetArgs(os.Args[1:])
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "gateway-bench:", err)
		stop()
		os.Exit(1)
	}
}
