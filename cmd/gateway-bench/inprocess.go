package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"time"

	"gateway/cmd/internal/gatewaycli"
	"gateway/internal/childproc"
)

// runInProcess runs the gateway in this process through gatewaycli.Run, the whole
// `gateway` command line, as `gateway run --config FILE` with the same config file the
// external mode gives its child: the same constructors, the same pacing, nothing wired by
// hand. CPU and memory then include the fakes and the load driver.
func runInProcess(ctx context.Context, o Options) (Result, error) {
	var profile func() func()
	if o.CPUProfile != nil || o.MemProfile != nil {
		profile = func() func() {
			if o.CPUProfile != nil {
				if perr := pprof.StartCPUProfile(o.CPUProfile); perr != nil {
					o.Logf("cpu profile: %v", perr)
				}
			}
			return func() {
				if o.CPUProfile != nil {
					pprof.StopCPUProfile()
				}
				if o.MemProfile != nil {
					if perr := pprof.Lookup("allocs").WriteTo(o.MemProfile, 0); perr != nil {
						o.Logf("memory profile: %v", perr)
					}
				}
			}
		}
	}
	return bench(ctx, o, "in-process", func(fx *fixture) (*running, error) { return startSelf(ctx, fx), nil }, profile)
}

// startSelf runs gatewaycli.Run in a goroutine until stop cancels its context (as SIGTERM
// does in `gateway run`).
func startSelf(ctx context.Context, fx *fixture) *running {
	runCtx, cancel := context.WithCancel(ctx)
	log := &childproc.Tail{Max: 16 << 10}
	done := make(chan struct{})
	var code int
	go func() {
		defer close(done)
		code = gatewaycli.Run(runCtx, nil, fx.args(), io.Discard, log, cleanEnv(fx.dir))
	}()
	stop := func() error {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			return errStopTimeout
		}
		if code != 0 {
			return fmt.Errorf("the gateway did not stop cleanly: exit status %d", code)
		}
		return nil
	}
	return &running{
		tgt: self{}, done: done, stop: stop, log: log,
		what: "this process: `gateway run` through gatewaycli.Run + fake Bot API server + load driver (external mode measures the gateway alone)",
	}
}

// cleanEnv is the gateway's environment in either mode: HOME and nothing else, so that no
// GATEWAY_* variable or API key of ours changes its config.
func cleanEnv(home string) []string { return []string{"HOME=" + home} }

// self is this process.
type self struct{}

func (self) mem() (memStatus, error)     { return readMem("self") }
func (self) resetPeak() bool             { return resetPeak("self") }
func (self) cpu() (time.Duration, error) { return selfCPU(), nil }
func (self) cheapHeap() bool             { return true }

func (self) runtimeStats() (runtimeStats, bool) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/stacks:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}}
	metrics.Read(s)
	for _, v := range s {
		if v.Value.Kind() != metrics.KindUint64 {
			return runtimeStats{}, false
		}
	}
	// heap_inuse as MemStats has it: objects and the unused part of their spans.
	return runtimeStats{Stacks: int64(s[0].Value.Uint64()), HeapInuse: int64(s[1].Value.Uint64() + s[2].Value.Uint64()),
		Goroutines: runtime.NumGoroutine()}, true
}

func (self) heap() (int64, int, bool) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0, 0, false
	}
	return int64(s[0].Value.Uint64()), runtime.NumGoroutine(), true
}
