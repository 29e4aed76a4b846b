// The benchmark measures the gateway on the Telegram path: a fake Bot API server
// (telegramtest), `gateway run` with the real Telegram adapter polling it, and a model
// that answers with the user's own text (`llm.provider: fake`, or the OpenAI SDK against
// a fake OpenAI API). One simulated user per chat sends a message, waits for the answer,
// and sends the next. It reports throughput, latency from injecting the update to the
// fake seeing the answer's final send, CPU time per message, resident memory (private
// and file-backed) at ready and at peak, and the Go heap.
//
// Both modes run `gateway run --config FILE` through the same code (gatewaycli.Run) with
// the same config file. In-process mode runs it in this process, so its CPU and memory
// include the fake server and the load driver. External mode runs the gateway binary as a
// child process and reads the child's own /proc figures: the gateway alone.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"gateway/channels/telegram/telegramtest"
)

// Providers a benchmark can answer with.
const (
	ProviderFake   = "fake"   // harness.Fake in-process; `llm.provider: fake` externally
	ProviderOpenAI = "openai" // the real OpenAI SDK against the openaitest fake server
)

// Options of one run. Zero values take the defaults noted.
type Options struct {
	Messages   int           // measured messages (default 1000)
	Chats      int           // chats, one user each (default 100)
	Warmup     int           // messages per chat before measuring (default 1; -1: none)
	ModelDelay time.Duration // the model's time to answer (default 0: at once); needs ProviderOpenAI
	// Rate, when > 0, sends that many messages per second in all whatever the answers do
	// (open loop: latency at a given load). 0: each chat's user waits for the answer
	// before sending the next (closed loop: the most the chats can load the gateway).
	Rate     float64
	Provider string        // ProviderFake (default) or ProviderOpenAI
	Timeout  time.Duration // bound on the whole run (default 5m)

	// External, when set, is the gateway binary to run as a child process (`gateway run`).
	External string
	// Floor, with External, runs External as the floor (`External floor-child run
	// --config FILE`, see runFloor) rather than as the gateway.
	Floor bool

	// SnapshotAt, when > 0, is when (from the start of the measured part) the target's
	// memory is read once in detail: private memory, goroutine stacks, heap in use. With a
	// model delay it shows what the turns in flight hold.
	SnapshotAt time.Duration

	// CPUProfile and MemProfile, when set, receive pprof profiles of the measured part
	// (in-process only).
	CPUProfile io.Writer
	MemProfile io.Writer
	// Logf, when set, is told of progress.
	Logf func(format string, args ...any)
}

func (o Options) withDefaults() (Options, error) {
	if o.Messages == 0 {
		o.Messages = 1000
	}
	if o.Chats == 0 {
		o.Chats = 100
	}
	switch {
	case o.Warmup == 0:
		o.Warmup = 1
	case o.Warmup < 0:
		o.Warmup = 0
	}
	if o.Provider == "" {
		o.Provider = ProviderFake
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	var errs []error
	if o.Messages < 1 || o.Messages > 1_000_000 {
		errs = append(errs, fmt.Errorf("--messages: %d is not between 1 and 1000000", o.Messages))
	}
	if o.Chats < 1 || o.Chats > 10_000 {
		errs = append(errs, fmt.Errorf("--chats: %d is not between 1 and 10000", o.Chats))
	}
	if o.Warmup > 1000 {
		errs = append(errs, fmt.Errorf("--warmup: %d is more than 1000 messages per chat", o.Warmup))
	}
	if o.ModelDelay < 0 || o.ModelDelay > time.Minute {
		errs = append(errs, fmt.Errorf("--model-delay: %s is not between 0 and 1m", o.ModelDelay))
	}
	if o.Rate < 0 || o.Rate > 100_000 {
		errs = append(errs, fmt.Errorf("--rate: %g is not between 0 and 100000 messages a second", o.Rate))
	}
	switch o.Provider {
	case ProviderFake, ProviderOpenAI:
	default:
		errs = append(errs, fmt.Errorf("--provider: %q is not fake or openai", o.Provider))
	}
	if o.Provider == ProviderFake && o.ModelDelay > 0 {
		errs = append(errs, errors.New("--model-delay needs --provider openai: `llm.provider: fake` in the gateway's config answers at once"))
	}
	if o.External != "" && (o.CPUProfile != nil || o.MemProfile != nil) {
		errs = append(errs, errors.New("profiles are for in-process runs only (the child serves none)"))
	}
	return o, errors.Join(errs...)
}

// Result is what one run measured. Times are in milliseconds, sizes in MiB.
type Result struct {
	Mode       string  `json:"mode"` // "in-process" or "external"
	Includes   string  `json:"includes"`
	Provider   string  `json:"provider"`
	Messages   int     `json:"messages"`
	Chats      int     `json:"chats"`
	Warmup     int     `json:"warmup_per_chat"`
	ModelDelay float64 `json:"model_delay_ms"`
	// Pacing is always true: `gateway run` paces its sends to Telegram's limits (30/s per
	// bot, 1/s per chat) and no config key turns that off. Reported for readers of old results.
	Pacing bool    `json:"pacing"`
	Rate   float64 `json:"rate,omitempty"` // open-loop messages per second; 0: closed loop

	Answered   int     `json:"answered"`
	Failed     int     `json:"failed"`
	Elapsed    float64 `json:"elapsed_ms"`
	MsgsPerSec float64 `json:"msgs_per_sec"`
	P50        float64 `json:"latency_p50_ms"`
	P90        float64 `json:"latency_p90_ms"`
	P99        float64 `json:"latency_p99_ms"`
	Max        float64 `json:"latency_max_ms"`
	AddedP99   float64 `json:"added_latency_p99_ms"` // p99 less the model delay
	CPUPerMsg  float64 `json:"cpu_per_msg_ms"`
	CPUTotal   float64 `json:"cpu_total_ms"`

	RSSReady float64 `json:"rss_ready_mib"`
	RSSPeak  float64 `json:"rss_peak_mib"`
	// The RSS split as /proc/PID/status reports it: private memory (RssAnon: heap,
	// stacks) and mapped file pages (RssFile: mostly the binary's code and read-only data).
	AnonReady float64 `json:"rss_anon_ready_mib"`
	AnonPeak  float64 `json:"rss_anon_peak_mib"` // sampled
	FileReady float64 `json:"rss_file_ready_mib"`
	FilePeak  float64 `json:"rss_file_peak_mib"` // sampled
	HeapReady float64 `json:"heap_ready_mib,omitempty"`
	HeapPeak  float64 `json:"heap_peak_mib,omitempty"` // in-process: sampled peak; external: at the end
	GorReady  int     `json:"goroutines_ready,omitempty"`
	GorPeak   int     `json:"goroutines_peak,omitempty"`

	// The snapshot at SnapshotAt, if asked for and taken.
	Snapshot *Snapshot `json:"snapshot,omitempty"`

	Errors []string `json:"errors,omitempty"` // a few unexpected answers, if any
}

// Snapshot is the target's memory at one moment of the measured part.
type Snapshot struct {
	At         float64 `json:"at_ms"`
	Anon       float64 `json:"rss_anon_mib"`
	Stacks     float64 `json:"stacks_mib"`
	HeapInuse  float64 `json:"heap_inuse_mib"`
	Goroutines int     `json:"goroutines"`
}

// Run runs one benchmark.
func Run(ctx context.Context, o Options) (Result, error) {
	o, err := o.withDefaults()
	if err != nil {
		return Result{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if o.External != "" {
		return runExternal(ctx, o)
	}
	return runInProcess(ctx, o)
}

// target is the process being measured.
type target interface {
	mem() (memStatus, error)
	resetPeak() bool
	cpu() (time.Duration, error)
	// heap returns the Go heap in use and the goroutine count, when known; cheap says
	// whether sampling it during the run costs the target nothing worth counting.
	heap() (bytes int64, goroutines int, ok bool)
	cheapHeap() bool
	// runtimeStats reads the Go runtime's memory split, when known.
	runtimeStats() (runtimeStats, bool)
}

// runtimeStats is where the Go runtime's memory is at one moment.
type runtimeStats struct {
	Stacks     int64 // goroutine stacks in use
	HeapInuse  int64 // heap spans in use (live objects, garbage not yet swept, their spans' slack)
	Goroutines int
}

// measure warms up, then drives the measured messages and reads the target around them.
func measure(ctx context.Context, o Options, tr *tracker, srv *telegramtest.Server, tgt target, profile func() func()) (Result, error) {
	r := Result{
		Provider: o.Provider, Messages: o.Messages, Chats: o.Chats, Warmup: o.Warmup,
		ModelDelay: ms(o.ModelDelay), Pacing: true, Rate: o.Rate,
	}
	ready, err := tgt.mem()
	if err != nil {
		return r, err
	}
	r.RSSReady, r.AnonReady, r.FileReady = mib(ready.RSS), mib(ready.Anon), mib(ready.File)
	if h, g, ok := tgt.heap(); ok {
		r.HeapReady, r.GorReady = mib(h), g
	}
	if o.Warmup > 0 {
		o.Logf("warming up: %d message(s) in each of %d chats", o.Warmup, o.Chats)
		counts := make([]int, o.Chats)
		for i := range counts {
			counts[i] = o.Warmup
		}
		if _, _, err := tr.drive(ctx, srv, counts, 0, 0); err != nil {
			return r, fmt.Errorf("warm-up did not finish: %w", err)
		}
	}
	srv.ForgetCalls()
	o.Logf("measuring: %d messages over %d chats", o.Messages, o.Chats)

	peakReset := tgt.resetPeak()
	var (
		smu      sync.Mutex
		peakRSS  int64
		peakAnon int64
		peakFile int64
		peakHeap int64
		peakGor  int
	)
	sampleOnce := func() {
		m, err := tgt.mem()
		smu.Lock()
		defer smu.Unlock()
		if err == nil {
			peakRSS, peakAnon, peakFile = max(peakRSS, m.RSS), max(peakAnon, m.Anon), max(peakFile, m.File)
		}
		if tgt.cheapHeap() {
			if h, g, ok := tgt.heap(); ok {
				peakHeap, peakGor = max(peakHeap, h), max(peakGor, g)
			}
		}
	}
	stopSampler := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for i := 1; ; i++ {
			select {
			case <-stopSampler:
				return
			case <-t.C:
				sampleOnce()
				if i%25 == 0 {
					srv.ForgetCalls() // the fake's record of calls would grow with the run
				}
			}
		}
	}()

	var stopProfile func()
	if profile != nil {
		stopProfile = profile()
	}
	cpu0, err := tgt.cpu()
	if err != nil {
		close(stopSampler)
		<-samplerDone
		return r, err
	}
	start := time.Now()
	snapDone := make(chan *Snapshot, 1)
	if o.SnapshotAt > 0 {
		snapCtx, cancelSnap := context.WithCancel(ctx)
		defer cancelSnap()
		go func() {
			snapDone <- snapshot(snapCtx, tgt, o.SnapshotAt)
		}()
	} else {
		snapDone <- nil
	}
	samples, bad, driveErr := tr.drive(ctx, srv, spread(o.Messages, o.Chats), o.Warmup, o.Rate)
	elapsed := time.Since(start)
	cpu1, cpuErr := tgt.cpu()
	if stopProfile != nil {
		stopProfile()
	}
	close(stopSampler)
	<-samplerDone
	sampleOnce()
	if end, err := tgt.mem(); err == nil && peakReset {
		peakRSS = max(peakRSS, end.HWM)
	}
	if !tgt.cheapHeap() {
		if h, g, ok := tgt.heap(); ok {
			peakHeap, peakGor = h, g
		}
	}

	r.Snapshot = <-snapDone

	p, answered, failed := latencies(samples)
	r.Answered, r.Failed, r.Errors = answered, failed, bad
	r.Elapsed = ms(elapsed)
	r.MsgsPerSec = float64(answered) / elapsed.Seconds()
	r.P50, r.P90, r.P99, r.Max = ms(p.P50), ms(p.P90), ms(p.P99), ms(p.Max)
	r.AddedP99 = ms(p.P99 - o.ModelDelay)
	if cpuErr == nil && len(samples) > 0 {
		r.CPUTotal = ms(cpu1 - cpu0)
		r.CPUPerMsg = ms(cpu1-cpu0) / float64(len(samples))
	}
	r.RSSPeak, r.AnonPeak, r.FilePeak = mib(peakRSS), mib(peakAnon), mib(peakFile)
	r.HeapPeak, r.GorPeak = mib(peakHeap), peakGor
	if driveErr != nil {
		return r, fmt.Errorf("only %d of %d messages were answered before the run's deadline: %w", answered, o.Messages, driveErr)
	}
	return r, cpuErr
}

// snapshot waits until at, then reads tgt once; nil if ctx ended first or nothing could
// be read.
func snapshot(ctx context.Context, tgt target, at time.Duration) *Snapshot {
	t := time.NewTimer(at)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil
	case <-t.C:
	}
	m, err := tgt.mem()
	rs, ok := tgt.runtimeStats()
	if err != nil || !ok {
		return nil
	}
	return &Snapshot{At: ms(at), Anon: mib(m.Anon), Stacks: mib(rs.Stacks), HeapInuse: mib(rs.HeapInuse), Goroutines: rs.Goroutines}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func mib(b int64) float64        { return float64(b) / (1 << 20) }

// WriteTable prints r for people.
func WriteTable(w io.Writer, r Result) {
	var b strings.Builder
	fmt.Fprintf(&b, "gateway-bench — Telegram path, %s\n", r.Mode)
	fmt.Fprintf(&b, "  measured process  %s\n", r.Includes)
	load := "closed loop: one user per chat sends the next message when the answer arrived"
	if r.Rate > 0 {
		load = fmt.Sprintf("open loop: %g messages a second in all, round-robin over the chats", r.Rate)
	}
	fmt.Fprintf(&b, "  load              %d messages over %d chats, %d warm-up per chat\n", r.Messages, r.Chats, r.Warmup)
	fmt.Fprintf(&b, "                    %s\n", load)
	fmt.Fprintf(&b, "  model             %s, answers after %s\n", r.Provider, time.Duration(r.ModelDelay*float64(time.Millisecond)))
	fmt.Fprintf(&b, "  pacing            as in production (Telegram's limits: 30 sends/s per bot, 1/s per chat)\n")
	fmt.Fprintf(&b, "\n")
	fmt.Fprintf(&b, "  %-22s %s\n", "answered", fmt.Sprintf("%d (%d failed)", r.Answered, r.Failed))
	fmt.Fprintf(&b, "  %-22s %.0f msg/s in %.2f s\n", "throughput", r.MsgsPerSec, r.Elapsed/1000)
	fmt.Fprintf(&b, "  %-22s p50 %.1f ms  p90 %.1f ms  p99 %.1f ms  max %.1f ms\n", "latency (update→sent)", r.P50, r.P90, r.P99, r.Max)
	fmt.Fprintf(&b, "  %-22s %.1f ms\n", "added latency p99", r.AddedP99)
	fmt.Fprintf(&b, "  %-22s %.3f ms/msg (%.0f ms in all)\n", "CPU (user+sys)", r.CPUPerMsg, r.CPUTotal)
	fmt.Fprintf(&b, "  %-22s ready %.1f MiB, peak %.1f MiB\n", "RSS", r.RSSReady, r.RSSPeak)
	fmt.Fprintf(&b, "  %-22s ready %.1f MiB, peak %.1f MiB (heap, stacks)\n", "  private (RssAnon)", r.AnonReady, r.AnonPeak)
	fmt.Fprintf(&b, "  %-22s ready %.1f MiB, peak %.1f MiB (the binary's pages)\n", "  file-backed", r.FileReady, r.FilePeak)
	if r.HeapReady > 0 || r.HeapPeak > 0 {
		label := "peak"
		if r.Mode == "external" {
			label = "end"
		}
		fmt.Fprintf(&b, "  %-22s ready %.1f MiB, %s %.1f MiB\n", "Go heap (objects)", r.HeapReady, label, r.HeapPeak)
		fmt.Fprintf(&b, "  %-22s ready %d, %s %d\n", "goroutines", r.GorReady, label, r.GorPeak)
	}
	if sn := r.Snapshot; sn != nil {
		fmt.Fprintf(&b, "  %-22s private %.1f MiB, stacks %.2f MiB, heap in use %.2f MiB, %d goroutines\n",
			fmt.Sprintf("at %s", time.Duration(sn.At*float64(time.Millisecond))), sn.Anon, sn.Stacks, sn.HeapInuse, sn.Goroutines)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "  unexpected answer    %s\n", e)
	}
	_, _ = io.WriteString(w, b.String())
}

// WriteJSON prints r as one JSON object.
func WriteJSON(w io.Writer, r Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
