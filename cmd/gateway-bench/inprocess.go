package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"gateway/channels"
	"gateway/channels/telegram"
	"gateway/channels/telegram/telegramtest"
	"gateway/gateway"
	"gateway/harness"
	"gateway/harness/openaitest"
	"gateway/hooks"
	"gateway/internal/llm"
	"gateway/internal/secret"
	"gateway/profiles"
)

// runInProcess wires the gateway as cmd/gateway does (metrics registry with the Go and
// process collectors, a hook bus, the builtin profile, the JSONL store, one shared HTTP
// client) with the Telegram adapter pointed at a fake in this process.
func runInProcess(ctx context.Context, o Options) (res Result, err error) {
	dir, err := os.MkdirTemp("", "gateway-bench-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)

	tr := newTracker(o.Chats)
	fake := telegramtest.Start(telegramtest.Options{OnSent: tr.onSent})
	defer fake.Close()

	// The shared client as cmd/gateway builds it.
	client := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	defer client.CloseIdleConnections()
	var prov harness.Provider
	switch o.Provider {
	case ProviderOpenAI:
		oa := openaitest.NewServer()
		defer oa.Close()
		delay := o.ModelDelay
		oa.SetFunc(func(r openaitest.Request) openaitest.Reply {
			text := ""
			for _, m := range r.Messages {
				if m.Role == "user" {
					text = m.Content
				}
			}
			return openaitest.Reply{Text: text, Delay: delay}
		})
		prov, err = harness.NewProvider(harness.Config{Provider: "openai", Model: "bench", BaseURL: oa.URL(), APIKey: secret.Secret("sk-bench")}, client)
		if err != nil {
			return Result{}, err
		}
	default:
		prov = echoModel{delay: o.ModelDelay}
	}

	pacing := telegram.Pacing{GlobalPerSecond: -1, PerChatInterval: -1, GroupInterval: -1}
	if o.Pacing {
		pacing = telegram.Pacing{}
	}
	gw, _, err := newGateway(wiring{dir: dir, apiURL: fake.URL, provider: prov, pacing: pacing, hooks: o.Hooks, client: client})
	if err != nil {
		return Result{}, err
	}
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = gw.Start(startCtx)
	cancel()
	if err != nil {
		_ = gw.Stop(context.Background())
		return Result{}, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if serr := gw.Stop(stopCtx); serr != nil && err == nil {
			err = fmt.Errorf("stopping the gateway: %w", serr)
		}
	}()

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
	res, err = measure(ctx, o, tr, fake, self{}, profile)
	res.Mode = "in-process"
	res.Includes = "this process: gateway + Telegram adapter + fake Bot API server + load driver (external mode measures the gateway alone)"
	return res, err
}

// echoModel answers with the user's latest text after a delay, in one piece, as the fake
// that `llm.provider: fake` builds does; unlike harness.Fake it keeps no request log,
// which would weigh on the memory measured.
type echoModel struct{ delay time.Duration }

func (echoModel) Name() string { return "fake" }

func (m echoModel) Stream(ctx context.Context, req *harness.Request, onDelta func(string)) (*harness.Response, error) {
	if m.delay > 0 {
		t := time.NewTimer(m.delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	if req.OnResponse != nil {
		req.OnResponse(http.StatusOK, nil)
	}
	text := ""
	for _, msg := range req.Messages {
		if msg.Role == llm.RoleUser {
			text = msg.Content
		}
	}
	onDelta(text)
	return &harness.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: text}, StopReason: "stop"}, nil
}

// wiring is what newGateway needs.
type wiring struct {
	dir      string // state: sessions and the Telegram offset
	apiURL   string // the fake Bot API
	provider harness.Provider
	pacing   telegram.Pacing
	hooks    int // no-op observers
	client   *http.Client
}

// newGateway builds a gateway with the Telegram adapter as cmd/gateway wires it: a
// metrics registry with the Go and process collectors, a hook bus, the builtin profile,
// the JSONL store and one shared HTTP client.
func newGateway(w wiring) (*gateway.Gateway, *prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := gateway.NewMetrics(reg)
	log := slog.New(slog.DiscardHandler)
	bus := hooks.NewBus(hooks.Options{Timeout: 10 * time.Second, Logger: log, OnError: m.HookError})
	for i := range w.hooks {
		bus.Observe(fmt.Sprintf("bench:noop-%d", i), func(context.Context, hooks.Event) {})
	}
	store, err := harness.OpenStore(filepath.Join(w.dir, "sessions"))
	if err != nil {
		return nil, nil, err
	}
	rt := &gateway.Runtime{Bus: bus, Profiles: profiles.Builtin(""), LLM: harness.Config{Provider: w.provider.Name(), Model: "bench"}}
	gw, err := gateway.New(gateway.Defaults(), rt, gateway.Deps{
		Store:       store,
		NewProvider: func(harness.Config) (harness.Provider, error) { return w.provider, nil },
		Logger:      log,
		Metrics:     m,
	})
	if err != nil {
		return nil, nil, err
	}
	tg, err := telegram.New(
		telegram.Config{Enabled: true, Token: secret.Secret(telegramtest.Token), APIURL: w.apiURL, Access: channels.Access{DMPolicy: channels.DMOpen}},
		telegram.Options{Logger: log, StateDir: filepath.Join(w.dir, "telegram"), HTTPClient: w.client, Pacing: w.pacing})
	if err != nil {
		return nil, nil, err
	}
	gw.AddChannel(tg)
	return gw, reg, nil
}

// self is this process.
type self struct{}

func (self) mem() (memStatus, error)     { return readMem("self") }
func (self) resetPeak() bool             { return resetPeak("self") }
func (self) cpu() (time.Duration, error) { return selfCPU(), nil }
func (self) cheapHeap() bool             { return true }

func (self) heap() (int64, int, bool) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0, 0, false
	}
	return int64(s[0].Value.Uint64()), runtime.NumGoroutine(), true
}
