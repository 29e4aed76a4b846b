package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"gateway/channels/telegram/telegramtest"
	"gateway/harness/openaitest"
	"gateway/internal/childproc"
)

// fixture is what both modes run the gateway against: a fake Bot API (and, for
// ProviderOpenAI, a fake OpenAI API) served by this process, a temp dir, and the config
// file `gateway run --config` reads there. One code path builds it; only the process
// that runs `gateway run` differs (this one or a child).
type fixture struct {
	dir     string // temp dir: the config, the state dir, the child's binary and HOME
	cfgPath string
	addr    string // the gateway's http.listen: /readyz and /metrics
	tr      *tracker
	fake    *telegramtest.Server
	oa      *openaitest.Server // nil unless ProviderOpenAI
}

// newFixture starts the fakes and writes the config.
func newFixture(o Options) (fx *fixture, err error) {
	dir, err := os.MkdirTemp("", "gateway-bench-")
	if err != nil {
		return nil, err
	}
	fx = &fixture{dir: dir, tr: newTracker(o.Chats)}
	defer func() {
		if err != nil {
			fx.Close()
			fx = nil
		}
	}()
	fx.fake = telegramtest.Start(telegramtest.Options{OnSent: fx.tr.onSent})

	// `llm.provider: fake` answers with the user's text at once (the fake built from a
	// config keeps no request log); a model delay needs the OpenAI fake.
	llmCfg := map[string]any{"provider": "fake", "model": "bench"}
	if o.Provider == ProviderOpenAI {
		fx.oa = openaitest.NewServer()
		delay := o.ModelDelay
		fx.oa.SetFunc(func(r openaitest.Request) openaitest.Reply {
			text := ""
			for _, m := range r.Messages {
				if m.Role == "user" {
					text = m.Content
				}
			}
			return openaitest.Reply{Text: text, Delay: delay}
		})
		llmCfg = map[string]any{"provider": "openai", "model": "bench", "base_url": fx.oa.URL(), "api_key": "sk-bench"}
	}
	port, err := freePort()
	if err != nil {
		return fx, err
	}
	fx.addr = "127.0.0.1:" + strconv.Itoa(port)
	cfg := map[string]any{
		"state_dir": filepath.Join(dir, "state"),
		"http":      map[string]any{"listen": fx.addr},
		"log":       map[string]any{"level": "warn", "format": "json"},
		"llm":       llmCfg,
		"stt":       map[string]any{"enabled": false},
		"tts":       map[string]any{"mode": "off"},
		"hooks":     map[string]any{"dirs": []string{}},
		"profiles":  map[string]any{"dir": filepath.Join(dir, "profiles")},
		"channels": map[string]any{
			"web": map[string]any{"enabled": false},
			"telegram": map[string]any{
				"enabled": true, "token": telegramtest.Token, "api_url": fx.fake.URL,
				"dm_policy": "open", "allow_from": []string{},
			},
		},
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return fx, err
	}
	fx.cfgPath = filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(fx.cfgPath, b, 0o600); err != nil {
		return fx, err
	}
	return fx, nil
}

// args are the gateway's command line, in either mode.
func (fx *fixture) args() []string { return []string{"run", "--config", fx.cfgPath} }

func (fx *fixture) url(path string) string { return "http://" + fx.addr + path }

func (fx *fixture) Close() {
	if fx.oa != nil {
		fx.oa.Close()
	}
	if fx.fake != nil {
		fx.fake.Close()
	}
	_ = os.RemoveAll(fx.dir)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls /readyz until the gateway answers 200, it exits, or a minute passes.
func waitReady(ctx context.Context, client *http.Client, url string, done <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			return errors.New("the gateway exited before it was ready")
		case <-ctx.Done():
			return fmt.Errorf("the gateway was not ready within a minute: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// running is a started gateway, in this process or a child.
type running struct {
	tgt  target
	done <-chan struct{} // closed when the gateway has returned or exited
	stop func() error    // asks it to stop and waits
	log  *childproc.Tail // its stderr (the log: warnings and errors)
	what string          // for Result.Includes
}

// bench runs the gateway that start starts against fx and measures it.
func bench(ctx context.Context, o Options, mode string, start func(*fixture) (*running, error), profile func() func()) (res Result, err error) {
	fx, err := newFixture(o)
	if err != nil {
		return Result{}, err
	}
	defer fx.Close()
	gw, err := start(fx)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		if serr := gw.stop(); serr != nil && err == nil {
			err = fmt.Errorf("%w\nits log:\n%s", serr, gw.log.String())
		}
	}()
	o.Logf("started the gateway (%s); waiting for /readyz", mode)
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	if err := waitReady(ctx, client, fx.url("/readyz"), gw.done); err != nil {
		return Result{}, fmt.Errorf("%w\nits log:\n%s", err, gw.log.String())
	}
	// Let start-up work settle (the first getUpdates, the setMyCommands answer).
	select {
	case <-time.After(500 * time.Millisecond):
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	res, err = measure(ctx, o, fx.tr, fx.fake, gw.tgt, profile)
	res.Mode, res.Includes = mode, gw.what
	if err != nil && gw.log.String() != "" {
		err = fmt.Errorf("%w\nthe gateway's log:\n%s", err, gw.log.String())
	}
	return res, err
}

// errStopTimeout is returned when the gateway did not stop within its grace period.
var errStopTimeout = errors.New("the gateway did not stop within 30s")
