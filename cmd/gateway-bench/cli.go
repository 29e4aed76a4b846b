package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
)

// newBenchCmd is gateway-bench's only command: the Telegram path under load against fakes,
// in this process or with `gateway run` as a child process (--external).
func newBenchCmd(ctx context.Context, stdout, stderr io.Writer) *cobra.Command {
	var (
		o          Options
		external   bool
		floor      bool
		binary     string
		asJSON     bool
		cpuProfile string
		memProfile string
		quiet      bool
	)
	cmd := &cobra.Command{
		Use:   "gateway-bench",
		Short: "Measure throughput, latency, CPU and memory on the Telegram path against a fake Bot API",
		Long: `gateway-bench runs ` + "`gateway run --config FILE`" + ` against a fake Telegram Bot API and a
model that answers with the user's own text, with a config file it writes. By default one
simulated user per chat sends a message, waits for the answer and sends the next: the most
load the chats can make, so latency there includes queueing. --rate sends at a fixed rate
instead, to see latency at a given load.

By default the gateway runs in this process (the same code as the gateway binary, through
the same constructors), so CPU and memory include the fake server and the load driver.
With --external the gateway binary runs as a child process with the same config, and its
own /proc figures are reported: the gateway alone. Either way the gateway paces its sends
to Telegram's limits as in production.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true, // a failed run is not a usage error
		SilenceErrors: true, // main prints the error
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Warmup == 0 {
				o.Warmup = -1 // benchrun's zero means its default
			}
			if floor {
				if external || binary != "" {
					return errors.New("--floor runs this binary as the child: it takes no --external or --binary")
				}
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				o.External, o.Floor = exe, true
			}
			if external {
				o.External = binary
				if o.External == "" {
					exe, err := defaultBinary()
					if err != nil {
						return err
					}
					o.External = exe
				}
			}
			if !quiet {
				o.Logf = func(format string, args ...any) { fmt.Fprintf(stderr, "bench: "+format+"\n", args...) }
			}
			for _, p := range []struct {
				path string
				dst  *io.Writer
			}{{cpuProfile, &o.CPUProfile}, {memProfile, &o.MemProfile}} {
				if p.path == "" {
					continue
				}
				f, err := os.Create(p.path)
				if err != nil {
					return err
				}
				defer f.Close()
				*p.dst = f
			}
			res, err := Run(ctx, o)
			if res.Mode != "" {
				if asJSON {
					if jerr := WriteJSON(stdout, res); jerr != nil {
						return jerr
					}
				} else {
					WriteTable(stdout, res)
				}
			}
			if err != nil {
				return err
			}
			if res.Failed > 0 {
				return fmt.Errorf("%d of %d answers were not what the model said", res.Failed, res.Failed+res.Answered)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Messages, "messages", 1000, "messages to measure")
	f.IntVar(&o.Chats, "chats", 100, "chats, with one user each")
	f.IntVar(&o.Warmup, "warmup", 1, "messages per chat before measuring (0: none)")
	f.DurationVar(&o.ModelDelay, "model-delay", 0, "time the model takes to answer (needs --provider openai)")
	f.Float64Var(&o.Rate, "rate", 0, "messages per second in all, whatever the answers do (open loop: latency at a load); 0: each chat's user waits for the answer before sending the next (closed loop)")
	f.StringVar(&o.Provider, "provider", ProviderFake, "model provider: fake (llm.provider: fake, answers at once), openai (the real SDK against a fake OpenAI API)")
	f.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "bound on the whole run")
	f.BoolVar(&external, "external", false, "run 'gateway run' as a child process and measure it alone")
	f.BoolVar(&floor, "floor", false, "run the floor as the child instead of the gateway: an echo bot on the same SDKs, paced, with no journal, history or hooks (the least a message can cost; see docs/bench.md)")
	f.StringVar(&binary, "binary", "", "gateway binary for --external (default: gateway beside this binary, else on PATH)")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	f.DurationVar(&o.SnapshotAt, "snapshot-at", 0, "read the gateway's private memory, goroutine stacks and heap in use once, this long after the measured part started (with --model-delay: what the turns in flight hold)")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a pprof CPU profile of the measured part (in-process only)")
	f.StringVar(&memProfile, "memprofile", "", "write a pprof allocation profile after the measured part (in-process only)")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress lines on stderr")
	return cmd
}

// defaultBinary is the gateway binary beside this one, or on PATH: the bench measures the
// product as built, never a copy of its wiring.
func defaultBinary() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "gateway")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath("gateway"); err == nil {
		return p, nil
	}
	return "", errors.New("--external: no gateway binary beside this one or on PATH; build it (go build -o cmd/gateway/gateway ./cmd/gateway) and give --binary")
}
