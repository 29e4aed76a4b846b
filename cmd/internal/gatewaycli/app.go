package gatewaycli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lmittmann/tint"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"gateway/builtins/stt"
	"gateway/builtins/tts"
	"gateway/channels"
	"gateway/channels/discord"
	"gateway/channels/slack"
	"gateway/channels/telegram"
	"gateway/channels/web"
	"gateway/cluster"
	"gateway/gateway"
	"gateway/harness"
	"gateway/harness/mcptools"
	"gateway/hooks"
	"gateway/internal/httptransport"
	"gateway/internal/media"
	"gateway/profiles"
	"gateway/state"
)

// app is the wired gateway: everything built from one config.
type app struct {
	cfgPath string
	cfg     Config
	getenv  func(string) string
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *gateway.Metrics
	client  *http.Client
	stt     *stt.STT
	tts     *tts.TTS
	gw      *gateway.Gateway
	state   *state.DB // the durable state; nil in a dry run (check, hooks list)

	// mcp are the MCP servers, started by run (not by check) before the gateway starts:
	// "" is the top-level mcp:, other keys are profiles' own.
	mcp map[string]*mcptools.Manager
	// mcpProfiles are the profiles' own MCP servers as they were started, by profile, for
	// a reload to tell the admin when a profile's list changed (it applies after a restart).
	mcpProfiles map[string][]mcptools.ServerConfig
	pg          *cluster.Postgres // cluster mode: sessions and gateway state; nil on a single node
	node        *cluster.Node     // cluster mode: the shared intake on NATS; nil on a single node

	// listening is the address serve listens on, once it does: what hooks with api: true
	// are given, since http.listen may name port 0 (a free port, chosen then).
	listening atomic.Pointer[string]

	reloadMu sync.Mutex         // one reload at a time; guards cfg, cfgPath, hooks and loadErrs after start
	hooks    []hooks.LoadedHook // of the current runtime's hook directories, disabled ones included
	loadErrs []hooks.LoadError  // of the current runtime, for `check` and `hooks list`
}

// hookReport is what a runtime's hook directories loaded and what failed to load.
type hookReport struct {
	hooks []hooks.LoadedHook
	errs  []hooks.LoadError
}

func newLogger(cfg LogConfig, w io.Writer, getenv func(string) string) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Level))
	if cfg.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
	}
	// Colour is for a person at a terminal: a file or a pipe gets plain text, and NO_COLOR
	// (https://no-color.org) turns it off everywhere.
	noColor := getenv("NO_COLOR") != "" || !isTerminal(w)
	return slog.New(tint.NewHandler(w, &tint.Options{Level: level, TimeFormat: time.TimeOnly, NoColor: noColor}))
}

// isTerminal reports whether w is a character device (a terminal), not a file or a pipe.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// buildApp wires every part from cfg without connecting anything: `check` runs exactly this.
// With dryRun (`check`, `hooks list`) it writes nothing: state_dir is checked, not created,
// and no store is opened. `run` passes the durable state it opened (nil in cluster mode,
// where the gateway state is in Postgres): the gateway journals into it and the adapters keep
// their cursors and remembered keys there. Nothing it builds runs until Start: no hook
// program is started and no event is emitted.
func buildApp(cfg Config, cfgPath string, log *slog.Logger, getenv func(string) string, db *state.DB, dryRun bool) (_ *app, retErr error) {
	a, cfg := newApp(cfg, cfgPath, log, getenv, db)
	defer func() {
		if retErr != nil && a.node != nil {
			a.node.Close()
		}
		if retErr != nil && a.pg != nil {
			a.pg.Close()
		}
	}()

	var err error
	tmp := filepath.Join(cfg.StateDir, "tmp")
	if dryRun {
		if err := checkStateDir(cfg.StateDir); err != nil {
			return nil, err
		}
	} else {
		if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
			return nil, fmt.Errorf("state_dir: %w", err)
		}
		if err := os.MkdirAll(tmp, 0o700); err != nil {
			return nil, fmt.Errorf("state_dir: %w", err)
		}
		// The adapters add their own name to state_dir; earlier versions were given
		// state_dir/NAME, so their files are one folder deeper.
		adoptNestedChannelDirs(cfg.StateDir, log)
	}
	errs := a.buildSpeech(cfg)
	if _, err := harness.NewProvider(cfg.LLM, a.client); err != nil {
		errs = append(errs, fmt.Errorf("llm: %w", err))
	}
	// At startup a broken hook is reported and skipped: it never stops the gateway.
	rt, report, err := a.buildRuntime(cfg)
	if err != nil {
		errs = append(errs, err)
	}
	a.hooks, a.loadErrs = report.hooks, report.errs
	hooks.LogLoaded(log, report.hooks)
	if err := errors.Join(errs...); err != nil {
		if rt != nil && rt.Close != nil {
			rt.Close()
		}
		return nil, err
	}
	// A dry run never starts the gateway, so nothing is ever saved: a store that was never
	// opened stands in, and no sessions directory is created.
	var store harness.SessionStore = new(harness.Store)
	if !dryRun && cfg.Cluster.Enabled() {
		// Cluster mode: sessions (and, in run, the gateway state) live in Postgres.
		if a.pg, err = cluster.OpenPostgres(context.Background(), cfg.Cluster.PostgresURL.Reveal(), state.Limits{}); err != nil {
			rt.Close()
			return nil, err
		}
		store = a.pg.Sessions()
		if a.node, err = cluster.OpenNode(context.Background(), cfg.Cluster, a.pg, cluster.NodeOptions{Log: log}); err != nil {
			rt.Close()
			return nil, err
		}
		a.reg.MustRegister(a.node.Collector())
	} else if !dryRun {
		files, err := harness.OpenStore(filepath.Join(cfg.StateDir, "sessions"))
		if err != nil {
			rt.Close()
			return nil, fmt.Errorf("state_dir: %w", err)
		}
		if db != nil {
			// A turn's history is made durable by the intake log's next sync, not a sync
			// of its own (state/ahead.go).
			files.WriteAheadTo(db)
		}
		store = files
	}
	var mediaStore *media.Store // nil in a dry run: nothing is kept, no folder is made
	if !dryRun {
		if mediaStore, err = media.OpenStore(filepath.Join(cfg.StateDir, "media"), cfg.Media); err != nil {
			rt.Close()
			return nil, fmt.Errorf("state_dir: %w", err)
		}
	}
	deps := gateway.Deps{
		Store:       store,
		NewProvider: func(c harness.Config) (harness.Provider, error) { return harness.NewProvider(c, a.client) },
		Logger:      log,
		Metrics:     a.metrics,
		Media:       mediaStore,
		StateDir:    cfg.StateDir,
	}
	switch { // the durable intake and per-chat settings: none in a dry run
	case a.node != nil:
		// Cluster mode: messages go through the shared intake and come back to the process
		// that holds their chat (see serve); nothing is journaled here.
		deps.Intake, deps.Settings = a.node, a.pg
		deps.Health = a.node.Healthy
		deps.Cluster = func(ctx context.Context) any { return a.node.Status(ctx) }
		deps.Forward = a.node.Forward
	case db != nil:
		deps.Journal, deps.Settings = db, db
	}
	a.gw, err = gateway.New(cfg.Sessions, rt, deps)
	if err != nil {
		rt.Close()
		return nil, err
	}
	chans, err := a.buildChannels(cfg)
	if err != nil {
		rt.Close()
		return nil, err
	}
	for _, ch := range chans {
		a.gw.AddChannel(ch)
	}
	return a, nil
}

// newApp is the app's shared plumbing (metrics, the outbound HTTP client) before any part
// is built, and cfg with state_dir made absolute, as the parts take it.
func newApp(cfg Config, cfgPath string, log *slog.Logger, getenv func(string) string, db *state.DB) (*app, Config) {
	a := &app{cfgPath: cfgPath, cfg: cfg, getenv: getenv, log: log, reg: prometheus.NewRegistry(), state: db}
	// Paths under state_dir reach programs that run elsewhere (a hook program in its own
	// folder, a speech command's wrapper script that changes directory): they are absolute,
	// whatever the working directory. (a.cfg keeps state_dir as written.)
	if abs, err := filepath.Abs(cfg.StateDir); err == nil {
		cfg.StateDir = abs
	}
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.metrics = gateway.NewMetrics(a.reg)
	// Every outbound call has a timeout; streaming calls get theirs from their context.
	// The model, Telegram and the other platforms each take many calls at once (a burst
	// of turns, sends beside the long poll): with the default 2 idle connections per host
	// the rest are closed after each burst and dialed (TLS) again for the next.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	// Each open connection holds a read and a write buffer. Every turn waiting for the
	// model holds a connection (HTTP/1.1 to a local or fake server), and the requests and
	// response headers are small; a body larger than the buffer is read and written past
	// it. 1 KB instead of 4 KB each: 6 KB less per connection (docs/bench.md, sixth pass).
	tr.ReadBufferSize, tr.WriteBufferSize = 1<<10, 1<<10
	// Calls to plain-HTTP endpoints (a local model, a local Bot API server) are made on
	// the caller's goroutine, with no goroutines held per connection; TLS and proxies go
	// through tr (docs/bench.md, tenth pass).
	a.client = &http.Client{Transport: &httptransport.Transport{
		Fallback: tr, Proxy: tr.Proxy, DialContext: tr.DialContext,
		MaxIdlePerHost: tr.MaxIdleConnsPerHost, MaxIdle: tr.MaxIdleConns,
		IdleTimeout: tr.IdleConnTimeout, BufferSize: tr.ReadBufferSize,
	}}
	return a, cfg
}

// buildSpeech builds the builtin speech hooks the config turns on; their temporary files
// go under state_dir/tmp. It returns what could not be built.
func (a *app) buildSpeech(cfg Config) []error {
	var errs []error
	tmp := filepath.Join(cfg.StateDir, "tmp")
	if cfg.STT.Enabled {
		s, err := stt.New(cfg.STT, stt.Options{Logger: a.log.With("hook", "builtin:stt"), HTTPClient: a.client, TempDir: tmp})
		if err != nil {
			errs = append(errs, fmt.Errorf("stt: %w", err))
		}
		a.stt = s
	}
	if cfg.TTS.Mode != "off" {
		t, err := tts.New(cfg.TTS, tts.Options{Logger: a.log.With("hook", "builtin:tts"), HTTPClient: a.client, TempDir: tmp})
		if err != nil {
			errs = append(errs, fmt.Errorf("tts: %w", err))
		}
		a.tts = t
	}
	return errs
}

func (a *app) buildChannels(cfg Config) ([]channels.Channel, error) {
	var out []channels.Channel
	var st channels.State // nil (in memory) for a dry run
	switch {
	case a.pg != nil:
		st = a.pg // cluster mode: cursors and remembered keys are shared
	case a.state != nil:
		st = a.state
	}
	var holder channels.Holder // cluster mode: one process at a time holds a connection
	if a.node != nil {
		holder = cluster.NewHolder(a.node.Leases(), a.node.Holder(), a.log)
	}
	var errs []error
	if cfg.Channels.Web.Enabled {
		out = append(out, web.New(cfg.Channels.Web, web.Options{Logger: a.log, MediaDir: filepath.Join(cfg.StateDir, "media", "web")}))
	}
	if cfg.Channels.Telegram.Enabled {
		opts := telegram.Options{Logger: a.log, StateDir: cfg.StateDir, HTTPClient: a.client, State: st}
		if a.node != nil {
			// One process polls at a time; every process sends, within one budget for the bot.
			opts.Holder = holder
			opts.Budget = a.pg.Budget("telegram."+telegram.BotID(cfg.Channels.Telegram.Token.Reveal()), 30, 30)
		}
		ch, err := telegram.New(cfg.Channels.Telegram, opts)
		if err != nil {
			errs = append(errs, err)
		} else {
			out = append(out, ch)
		}
	}
	if cfg.Channels.Discord.Enabled {
		// In cluster mode one process holds the gateway connection at a time; every one sends.
		ch, err := discord.New(cfg.Channels.Discord, discord.Options{Logger: a.log, StateDir: cfg.StateDir,
			HTTPClient: a.client, State: st, Holder: holder})
		if err != nil {
			errs = append(errs, err)
		} else {
			out = append(out, ch)
		}
	}
	if cfg.Channels.Slack.Enabled {
		ch, err := slack.New(cfg.Channels.Slack, slack.Options{Logger: a.log, StateDir: cfg.StateDir, HTTPClient: a.client, State: st})
		if err != nil {
			errs = append(errs, err)
		} else {
			out = append(out, ch)
		}
	}
	if len(out) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("channels: no channel is enabled (set channels.web.enabled: true for the local web chat)"))
	}
	return out, errors.Join(errs...)
}

// buildRuntime builds the reloadable set: a fresh bus with the builtins, hooks.dirs and each
// profile's hooks/, and the profiles. It fails only when profiles or bindings are invalid;
// hooks that cannot load are skipped and listed in the report (the caller decides whether
// that is fatal: never at startup, always on reload).
func (a *app) buildRuntime(cfg Config) (*gateway.Runtime, hookReport, error) {
	var report hookReport
	profs, err := profiles.LoadWith(cfg.Profiles, cfg.Bindings, profileOptions(cfg, a.getenv))
	if err != nil {
		return nil, report, locateProfileErrors(a.cfgPath, a.getenv, err)
	}
	bus := hooks.NewBus(hooks.Options{Timeout: cfg.Hooks.Timeout, Logger: a.log, OnError: a.metrics.HookError})
	var closers []func()
	if a.stt != nil {
		sc := bus.Scope("builtin:stt")
		a.stt.Register(sc)
		closers = append(closers, sc.Close)
	}
	if a.tts != nil {
		sc := bus.Scope("builtin:tts")
		a.tts.Register(sc)
		closers = append(closers, sc.Close)
	}
	reg := gateway.NewCommandRegistry()
	// The tools sessions get from elsewhere, before any hook declares its own: a hook tool
	// of the same name would be shadowed (or shadow), so it fails to load instead.
	for _, s := range cfg.MCP {
		reg.ReserveMCPServer("", s.Name)
	}
	for _, name := range profs.Names() {
		p := profs.Get(name)
		reg.ReserveBuiltinTools(p.Name, p.Tools)
		for _, s := range p.MCP {
			reg.ReserveMCPServer(p.Name, s.Name)
		}
	}
	load := func(dir string, opts hooks.DirOptions) {
		// LoadDir logs each hook it cannot load, with its path and reason; what loaded is
		// logged once the set is taken.
		opts.Timeout, opts.HTTPClient, opts.Logger, opts.Getenv = cfg.Hooks.Timeout, a.client, a.log, a.getenv
		opts.Registry = reg
		token := cfg.Admin.Token.Reveal()
		opts.APIEnv = func() []string {
			return []string{apiURLVar + "=" + a.apiURL(cfg.HTTP.Listen), apiTokenVar + "=" + token}
		}
		d := hooks.LoadDir(bus, dir, opts)
		closers = append(closers, d.Close)
		report.hooks = append(report.hooks, d.Hooks()...)
		report.errs = append(report.errs, d.Errors()...)
	}
	for _, dir := range cfg.Hooks.Dirs {
		load(dir, hooks.DirOptions{Source: "dir:" + dir})
	}
	for _, p := range profs.List() {
		if p.HooksDir != "" {
			load(p.HooksDir, hooks.DirOptions{Source: "profile:" + p.Name + ":hooks", Profile: p.Name})
		}
	}
	return &gateway.Runtime{
		Bus:       bus,
		Profiles:  profs,
		Commands:  reg,
		LLM:       sessionLLM(cfg.LLM),
		Tools:     resolveTools,
		MCPTools:  a.mcpTools,
		VoiceMode: a.tts.Mode(),
		Close: func() {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		},
	}, report, nil
}

// sessionLLM is the llm section as sessions take it. max_retries 0 in the config means no
// retries (the config's own default is 3), where the harness reads 0 as "its default".
func sessionLLM(c harness.Config) harness.Config {
	if c.MaxRetries == 0 {
		c.MaxRetries = -1
	}
	return c
}

// resolveTools builds the tools a profile names. Profiles are checked against it when they
// load (profileOptions), so a tool name it rejects is a load error, never a failed turn.
func resolveTools(names []string) ([]harness.Tool, error) { return harness.BuiltinTools(names) }

// profileOptions is what profiles are checked against: the same tool resolver sessions use
// and the global llm section their own is merged onto.
func profileOptions(cfg Config, getenv func(string) string) profiles.Options {
	llm := cfg.LLM
	return profiles.Options{Getenv: getenv, Tools: resolveTools, LLM: &llm}
}

// checkStateDir tells whether run could use dir as state_dir, creating nothing: dir is a
// directory, or does not exist yet and its nearest existing parent is one.
func checkStateDir(dir string) error {
	for p := filepath.Clean(dir); ; {
		fi, err := os.Stat(p)
		switch {
		case err == nil && fi.IsDir():
			return nil
		case err == nil && p == filepath.Clean(dir):
			return fmt.Errorf("state_dir: %s is not a directory", dir)
		case err == nil:
			return fmt.Errorf("state_dir: cannot create %s: %s is not a directory", dir, p)
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("state_dir: %w", err)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return nil
		}
		p = parent
	}
}

// reload re-reads the config file's profiles, bindings and hook directories and swaps them
// in. Unlike startup, any problem fails the reload, a hook that cannot load included: the
// admin is changing a running set, and half of the change is worse than none. On failure
// the running set stays and the error (also logged) says why. Turns in flight finish with
// the set they started with.
// The notes it returns name what the file changed that waits for a restart, so that
// `gateway reload` tells the admin as the log does.
func (a *app) reload() ([]string, error) {
	notes, err := a.tryReload()
	if err != nil {
		a.log.Error("reload failed; keeping the previous profiles and hooks", "err", err)
	}
	return notes, err
}

func (a *app) tryReload() ([]string, error) {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	if a.cfgPath == "" {
		// Started with no config file (built-in defaults): a ./gateway.yaml written since is
		// the file the admin asks to be read, as a start would. Otherwise the reload read
		// the defaults again and said "reloaded", the new profiles and bindings unused.
		a.cfgPath = resolveConfigPath("", a.getenv)
	}
	cfg, err := loadChecked(a.cfgPath, a.getenv)
	if err != nil {
		return nil, fmt.Errorf("reload: config: %w", err)
	}
	next := a.cfg
	next.Profiles, next.Bindings, next.Hooks = cfg.Profiles, cfg.Bindings, cfg.Hooks
	rt, report, err := a.buildRuntime(next)
	if err != nil {
		return nil, fmt.Errorf("reload: %w", err)
	}
	if len(report.errs) > 0 {
		rt.Close()
		errs := make([]error, len(report.errs))
		for i, e := range report.errs {
			errs[i] = fmt.Errorf("hook %w", e)
		}
		return nil, fmt.Errorf("reload: %w", errors.Join(errs...))
	}
	a.cfg, a.hooks, a.loadErrs = next, report.hooks, report.errs
	a.gw.Swap(rt)
	hooks.LogLoaded(a.log, report.hooks) // only now: a refused set never reads as loaded
	a.log.Info("reloaded profiles and hooks", "hooks", len(report.hooks), "handlers", len(rt.Bus.Handlers()))
	var notes []string
	if changed := restartOnly(next, cfg); len(changed) > 0 {
		const msg = "these sections of the config file changed and apply only after a restart"
		a.log.Warn("reload: "+msg, "sections", strings.Join(changed, ", "))
		notes = append(notes, msg+": "+strings.Join(changed, ", "))
	}
	for _, w := range configWarnings(a.cfg, a.cfgPath, rt.Profiles) {
		// A profile the reload brought in is told of as one present at the start is.
		a.log.Warn("reload: " + w)
		notes = append(notes, w)
	}
	if changed := mcpChanged(a.mcpProfiles, profileMCP(rt.Profiles)); len(changed) > 0 {
		// Otherwise a profile's new server is silently absent: its tools never reach the model.
		const msg = "the MCP servers of these profiles changed and apply only after a restart"
		a.log.Warn("reload: "+msg, "profiles", strings.Join(changed, ", "))
		notes = append(notes, msg+": "+strings.Join(changed, ", "))
	}
	return notes, nil
}

// profileMCP is each profile's own MCP servers, for the profiles that have some.
func profileMCP(set *profiles.Set) map[string][]mcptools.ServerConfig {
	out := map[string][]mcptools.ServerConfig{}
	for _, name := range set.Names() {
		if p := set.Get(name); len(p.MCP) > 0 {
			out[name] = p.MCP
		}
	}
	return out
}

// mcpChanged names, in order, the profiles whose MCP servers differ between running and file.
func mcpChanged(running, file map[string][]mcptools.ServerConfig) []string {
	names := slices.Collect(maps.Keys(running))
	for name := range file {
		if _, ok := running[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return slices.DeleteFunc(names, func(name string) bool { return reflect.DeepEqual(running[name], file[name]) })
}

// restartOnly names the config's top-level sections that differ between running and file
// among those a reload does not apply (all but profiles, bindings and hooks).
func restartOnly(running, file Config) []string {
	was, now := configMap(running, false), configMap(file, false)
	var changed []string
	for _, k := range slices.Sorted(maps.Keys(now)) {
		switch k {
		case "profiles", "bindings", "hooks":
			continue
		}
		if !reflect.DeepEqual(was[k], now[k]) {
			changed = append(changed, k)
		}
	}
	return changed
}

// runGateway runs until ctx ends (SIGINT/SIGTERM), then shuts down within the grace period.
func runGateway(ctx context.Context, path string, reload <-chan struct{}, stderr io.Writer, getenv func(string) string, names []string) error {
	cfg, err := loadStrict(path, getenv, names)
	if err != nil {
		fmt.Fprintf(stderr, "gateway: the configuration has problems:\n%s\n", indent(err.Error()))
		return exitCode(1)
	}
	log := newLogger(cfg.Log, stderr, getenv)
	// The durable state (intake journal, dedup window, per-chat settings, platform cursors)
	// is opened by run only, before the channels are built: a dry run writes nothing. In
	// cluster mode it is in Postgres, which buildApp opens.
	var a *app
	if cfg.Cluster.Enabled() {
		if a, err = buildApp(cfg, path, log, getenv, nil, false); err == nil {
			defer a.pg.Close()
			defer a.node.Close()
			log.Info("cluster mode: intake on NATS, sessions and gateway state in Postgres", "holder", a.node.Holder())
		}
	} else {
		var db *state.DB
		if db, err = state.Open(cfg.StateDir, state.Limits{}, log); err == nil {
			defer db.Close()
			a, err = buildApp(cfg, path, log, getenv, db, false)
		}
	}
	if err != nil {
		log.Error("cannot start", "err", err)
		return exitCode(1)
	}
	for _, w := range configWarnings(cfg, path, a.gw.Runtime().Profiles) {
		log.Warn(w)
	}
	if echoes := echoProfiles(cfg, a.gw.Runtime().Profiles); len(echoes) > 0 {
		log.Info(harness.EchoLog, "profiles", strings.Join(echoes, ", ")) // echo tells its chats only that no model is set up
	}
	a.startMCP(ctx)
	defer a.stopMCP()
	return a.serve(ctx, reload)
}

// echoProfiles are the profiles whose chats the echo provider answers (no model configured).
func echoProfiles(cfg Config, set *profiles.Set) []string {
	var out []string
	for _, name := range set.Names() {
		prov := strings.ToLower(strings.TrimSpace(gateway.ProfileLLM(cfg.LLM, set.Get(name)).Provider))
		if prov == "" || prov == "echo" {
			out = append(out, name)
		}
	}
	return out
}

// startMCP starts the MCP servers of the config and of each profile, and waits a little
// for their first connection so that the first chats see their tools. A server that is
// down is a warning; its tools are absent until it is back.
func (a *app) startMCP(ctx context.Context) {
	a.mcp = map[string]*mcptools.Manager{}
	opts := mcptools.Options{Logger: a.log, HTTPClient: a.client}
	if len(a.cfg.MCP) > 0 {
		a.mcp[""] = mcptools.Start(a.cfg.MCP, opts)
	}
	a.mcpProfiles = map[string][]mcptools.ServerConfig{}
	if rt := a.gw.Runtime(); rt != nil {
		a.mcpProfiles = profileMCP(rt.Profiles)
		for name, servers := range a.mcpProfiles {
			a.mcp[name] = mcptools.Start(servers, opts)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, m := range a.mcp {
		m.Wait(wctx)
	}
}

func (a *app) stopMCP() {
	for _, m := range a.mcp {
		m.Close()
	}
}

// mcpTools are the MCP tools a chat of the profile gets: the top-level servers' and the
// profile's own (servers are started once; a reload does not change them).
func (a *app) mcpTools(profile string) []harness.Tool {
	return append(a.mcp[""].Tools(nil), a.mcp[profile].Tools(nil)...)
}

// apiURL is the admin API's URL for a hook's program: the host listen names, on the port
// the gateway listens on once it does (listen may say 0). The host is kept as written: a
// wildcard's bound form ([::]) would turn into ::1, which a host without IPv6 lacks.
func (a *app) apiURL(listen string) string {
	if addr := a.listening.Load(); addr != nil {
		host, _, err1 := net.SplitHostPort(listen)
		_, port, err2 := net.SplitHostPort(*addr)
		if err1 == nil && err2 == nil {
			listen = net.JoinHostPort(host, port)
		}
	}
	return adminURL(listen) + "/api/v1"
}

func (a *app) serve(ctx context.Context, reload <-chan struct{}) error {
	ln, err := net.Listen("tcp", a.cfg.HTTP.Listen)
	if err != nil {
		a.log.Error("cannot listen", "http.listen", a.cfg.HTTP.Listen, "err", err)
		_ = a.gw.Stop(context.Background())
		return exitCode(1)
	}
	srv := &http.Server{
		Handler:           a.gw.Handler(gateway.HTTPOptions{Gatherer: a.reg, Reload: a.reload, AdminToken: a.cfg.Admin.Token.Reveal()}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	addr := ln.Addr().String()
	a.listening.Store(&addr)
	// A URL to open on this machine: a wildcard listen (0.0.0.0:8080, :8080) showed as
	// http://[::]:8080, which no browser opens; adminURL reaches it through loopback.
	host, _, _ := net.SplitHostPort(a.cfg.HTTP.Listen)
	_, port, _ := net.SplitHostPort(addr)
	a.log.Info("listening", "url", adminURL(net.JoinHostPort(host, port)), "listen", a.cfg.HTTP.Listen)

	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = a.gw.Start(startCtx)
	cancel()
	if err != nil && ctx.Err() != nil && !errors.Is(err, channels.ErrPermanent) {
		// SIGTERM while a channel was still connecting: a shutdown asked for, not a failure.
		a.log.Info("shutting down before every channel connected")
		shutdownHTTP(srv)
		_ = a.gw.Stop(context.Background())
		return nil
	}
	if err != nil {
		a.log.Error("cannot start", "err", err)
		shutdownHTTP(srv)
		_ = a.gw.Stop(context.Background())
		return exitCode(1)
	}
	stopNode := a.runNode()
	var runErr error
loop:
	for {
		select {
		case <-ctx.Done():
			a.log.Info("shutting down; a second SIGTERM or Ctrl-C stops at once (what is not answered yet is answered after the next start)")
			break loop
		case <-reload:
			_, _ = a.reload() // it logs why it failed and what waits for a restart
		case err := <-serveErr:
			a.log.Error("http server stopped", "err", err)
			runErr = exitCode(1)
			break loop
		}
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	if a.node != nil {
		a.node.Pause() // nothing new is handed over; what was is answered before Stop returns
	}
	if err := a.gw.Stop(stopCtx); err != nil {
		a.log.Error("shutdown", "err", err)
	}
	stopNode() // gives the partitions up: what is still unanswered goes to the others
	shutdownHTTP(srv)
	return runErr
}

// runNode starts consuming this process's partitions of the shared intake (cluster mode)
// and returns the function that stops it; without a cluster both do nothing.
func (a *app) runNode() (stop func()) {
	if a.node == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		forget := func(p int) {
			a.gw.Forget(func(key string) bool { return a.node.Partition(key) == p })
		}
		if err := a.node.Run(ctx, a.gw.Take, forget, a.gw.Forwarded); err != nil {
			a.log.Error("cluster: cannot consume the intake; this process answers nothing", "err", err)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

func shutdownHTTP(srv *http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
}
