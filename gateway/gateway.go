package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gateway/channels"
	"gateway/harness"
	"gateway/hooks"
	"gateway/internal/media"
	"gateway/profiles"
)

// Runtime is the reloadable part of the gateway: the hook bus with its handlers, the
// profiles and bindings, and the global model settings. A turn takes a snapshot of the
// runtime when it starts and keeps it to the end, so a reload never changes a turn in flight.
type Runtime struct {
	Bus      *hooks.Bus
	Profiles *profiles.Set
	LLM      harness.Config
	// VoiceMode is the text-to-speech hook's mode (tts.mode: inbound or always), which a
	// profile's and a chat's /voice choice override; "" or off when there is no such hook.
	// /voice and /status tell from it when this chat's answers are spoken.
	VoiceMode string
	// Commands holds the builtin commands and those the hooks declare, and the hooks'
	// tools (nil: builtins only).
	Commands *hooks.Registry
	// MCPTools returns the MCP servers' tools a chat of the profile gets (nil: none).
	MCPTools func(profile string) []harness.Tool
	// Tools builds the tools a profile enables (nil: no tools).
	Tools func(names []string) ([]harness.Tool, error)
	// Close releases what the runtime loaded (hook scopes); called after it is replaced
	// and no turn uses it any more. May be nil.
	Close func()

	// users counts the turns and intakes holding this runtime. A counter rather than a
	// WaitGroup: an acquire may still reach a runtime that was just replaced and has no
	// users, and a WaitGroup forbids Add from zero concurrently with Wait.
	mu      sync.Mutex
	users   int
	retired bool // replaced: no new users; Close runs when the last one leaves
	// clashes are the tool names (by profile) already logged as taken twice, so that each
	// is logged once per runtime, not at every chat that opens.
	clashes map[[2]string]bool
}

// firstClash tells whether the clash of tool name in profile's sessions is new (to log).
func (rt *Runtime) firstClash(profile, name string) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.clashes[[2]string{profile, name}] {
		return false
	}
	if rt.clashes == nil {
		rt.clashes = map[[2]string]bool{}
	}
	rt.clashes[[2]string{profile, name}] = true
	return true
}

// enter counts a new user unless the runtime was replaced.
func (rt *Runtime) enter() bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.retired {
		return false
	}
	rt.users++
	return true
}

// leave ends a use; the last user of a replaced runtime closes it.
func (rt *Runtime) leave() {
	rt.mu.Lock()
	rt.users--
	last := rt.retired && rt.users == 0
	rt.mu.Unlock()
	if last && rt.Close != nil {
		rt.Close()
	}
}

// retire marks the runtime replaced and closes it now if nobody uses it.
func (rt *Runtime) retire() {
	rt.mu.Lock()
	already, idle := rt.retired, rt.users == 0
	rt.retired = true
	rt.mu.Unlock()
	if !already && idle && rt.Close != nil {
		rt.Close()
	}
}

// Deps are what the gateway is built from.
type Deps struct {
	Store harness.SessionStore
	// NewProvider builds a provider for an effective llm config (global merged with the profile's).
	NewProvider func(harness.Config) (harness.Provider, error)
	Logger      *slog.Logger
	Metrics     *Metrics
	// Journal, when set, makes intake durable (see Deliver); Settings keeps per-chat
	// choices across restarts. Both are state.DB in a single-node gateway.
	Journal  Journal
	Settings Settings
	// Intake, when set (cluster mode), takes the Journal's place: messages are published to
	// it and come back through Take on the process that holds their chat (see SharedIntake).
	Intake SharedIntake
	// Health, when set, tells why an engine the gateway needs is down (cluster mode: NATS
	// or Postgres); the gateway is not ready meanwhile. Cluster, when set, is shown under
	// "cluster" in /api/v1/status (partition ownership and lag).
	Health  func(ctx context.Context) error
	Cluster func(ctx context.Context) any
	// Forward, when set (cluster mode), passes an admin API request about a chat to the
	// process that answers it: ok false means this process is the one (or none is), and
	// the request is handled here; that process runs it through Forwarded.
	Forward func(ctx context.Context, sessionKey, kind string, body []byte) (status int, out []byte, ok bool)
	// Media keeps the images and documents users send under state_dir/media, where the
	// histories reference them. Nil: they are referenced where the adapter put them.
	Media *media.Store
	// StateDir is the folder of the gateway's own state (state_dir). The admin API's send
	// refuses every file under it but the media store's ("": only the session store's
	// folder is refused).
	StateDir string
}

// Gateway routes messages between channels and per-chat sessions. Its zero value is not usable; call New.
type Gateway struct {
	cfg     Config
	log     *slog.Logger
	store   harness.SessionStore
	metrics *Metrics
	newProv func(harness.Config) (harness.Provider, error)
	media   *media.Store
	// stateDir is state_dir, whose files send refuses (but the media store's).
	stateDir string

	journal  Journal
	intake   SharedIntake
	health   func(ctx context.Context) error
	cluster  func(ctx context.Context) any
	forward  func(ctx context.Context, sessionKey, kind string, body []byte) (int, []byte, bool)
	settings Settings
	shared   *sharedPlaces // cluster mode: answers' placements; nil otherwise
	replay   *replay       // set by Start

	rt atomic.Pointer[Runtime]

	channels []channels.Channel
	byName   map[string]channels.Channel

	provMu    sync.Mutex
	providers map[harness.Config]harness.Provider

	mu       sync.Mutex
	sessions map[string]*session
	// heldNext are the messages kept for the next turn of chats whose session was let go
	// (evicted idle): the chat's next session takes them back. Under mu.
	heldNext map[string][]nextText
	// waiters are this process's inject calls whose message went to the shared intake
	// (cluster mode), by Inject.Waiter, until the session takes it or the call ends.
	waitMu  sync.Mutex
	waiters map[string]*injection

	dedup *channels.Dedup
	// taking holds the dedup keys Deliver is storing now (see claimDelivery); an entry
	// lives as long as its Deliver call.
	takingMu sync.Mutex
	taking   map[string]chan struct{}
	// journalTold: messages whose sender was told that the journal could not store them;
	// the platform offers such a message again every few seconds, and once is enough.
	journalTold *channels.Dedup
	turnSem     chan struct{}
	actors      sync.WaitGroup
	ctx         context.Context // lives until Stop's deadline: cancelling it aborts turns
	cancel      context.CancelCauseFunc

	stateMu  sync.Mutex
	started  bool
	stopped  bool
	ready    atomic.Bool
	stopping atomic.Bool
	connMu   sync.Mutex
	conn     map[string]bool
	// waiting are the channels whose Start failed for a reason that may pass (an outage):
	// startLater tries them again in the background, under retryCtx, until they start or Stop.
	waiting     map[string]bool // under connMu
	retryCtx    context.Context
	retryCancel context.CancelFunc
	retries     sync.WaitGroup
	retryWait   startBackoff
	// menuMu orders the command menu pushes of a reload and of a channel that started late,
	// so that the newest runtime's menu is the one a platform keeps.
	menuMu sync.Mutex
	// chatMenus are the chats, by channel, given a menu of their own by the last push (under
	// menuMu): a chat no longer bound gets the common menu back.
	chatMenus map[string]map[string]bool

	// Work an adapter hands over on a goroutine that must not wait runs on these (see
	// offload): lifecycle events in order on one worker, and the notices for messages
	// that were not taken.
	lifecycle *offload
	notices   *offload
	noticeMu  sync.Mutex
	noticing  map[string]bool // chats with a notice on its way: told once, not per message
}

// The bounds of the gateway's own work queues. A lifecycle event that finds its queue full
// is logged (the log line "channel connected"/"channel disconnected" is always written)
// and not emitted; a refused message whose notice finds no room is logged and counted
// (gateway_messages_rejected_total) but its chat is not told.
const (
	lifecycleQueue = 64
	noticeWorkers  = 4
	noticeQueue    = 256
)

// New builds a gateway around an initial runtime. Channels are added with AddChannel before Start.
func New(cfg Config, rt *Runtime, deps Deps) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if rt == nil || rt.Bus == nil || rt.Profiles == nil {
		return nil, errors.New("gateway: runtime needs a bus and profiles")
	}
	if deps.Store == nil || deps.NewProvider == nil {
		return nil, errors.New("gateway: a store and a provider factory are required")
	}
	cfg = cfg.WithDefaults()
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	g := &Gateway{
		cfg:         cfg,
		log:         log,
		store:       deps.Store,
		metrics:     deps.Metrics,
		newProv:     deps.NewProvider,
		journal:     deps.Journal,
		intake:      deps.Intake,
		health:      deps.Health,
		cluster:     deps.Cluster,
		forward:     deps.Forward,
		settings:    deps.Settings,
		media:       deps.Media,
		stateDir:    deps.StateDir,
		byName:      map[string]channels.Channel{},
		chatMenus:   map[string]map[string]bool{},
		providers:   map[harness.Config]harness.Provider{},
		sessions:    map[string]*session{},
		waiters:     map[string]*injection{},
		dedup:       channels.NewDedup(10_000),
		taking:      map[string]chan struct{}{},
		journalTold: channels.NewDedup(1000),
		turnSem:     make(chan struct{}, cfg.MaxConcurrentTurns),
		ctx:         ctx,
		cancel:      cancel,
		conn:        map[string]bool{},
		waiting:     map[string]bool{},
		retryWait:   startBackoff{first: time.Second, max: time.Minute},
		lifecycle:   newOffload(1, lifecycleQueue),
		notices:     newOffload(noticeWorkers, noticeQueue),
		noticing:    map[string]bool{},
	}
	if deps.Intake != nil && deps.Settings != nil {
		g.shared = newSharedPlaces(deps.Settings)
	}
	g.rt.Store(rt)
	return g, nil
}

// AddChannel registers a channel adapter. Call before Start.
func (g *Gateway) AddChannel(ch channels.Channel) {
	g.channels = append(g.channels, ch)
	g.byName[ch.Name()] = ch
}

// Routes registers every HTTP channel's routes on mux.
func (g *Gateway) Routes(mux *http.ServeMux) {
	for _, ch := range g.channels {
		if hc, ok := ch.(channels.HTTPChannel); ok {
			hc.Routes(mux)
		}
	}
}

// Runtime returns the current runtime.
func (g *Gateway) Runtime() *Runtime { return g.rt.Load() }

// Swap installs a new runtime (a reload). Turns already running finish with the old one,
// whose Close runs once the last of them has ended.
func (g *Gateway) Swap(rt *Runtime) {
	old := g.rt.Swap(rt)
	if old != nil && old != rt {
		old.retire()
	}
	g.stateMu.Lock()
	started := g.started && !g.stopped
	g.stateMu.Unlock()
	if started && (old == nil || menuSignature(old) != menuSignature(rt)) {
		g.pushCommands(g.ctx, rt) // the platforms' menus follow the new command list
	}
}

// acquire returns the current runtime, counted as in use until release.
func (g *Gateway) acquire() (rt *Runtime, release func()) {
	for {
		rt = g.rt.Load()
		if rt.enter() {
			return rt, rt.leave
		}
		if g.rt.Load() == rt {
			// Retired by Stop, not replaced: a straggler past Stop's deadline gets it as
			// it is rather than waiting for a successor that never comes.
			return rt, func() {}
		}
		// Replaced between the load and enter: the new one is already stored.
	}
}

// startBackoff is how long a channel that could not start waits before its next attempt:
// first, doubling up to max.
type startBackoff struct{ first, max time.Duration }

// startAttemptTimeout bounds one background attempt to start a channel.
const startAttemptTimeout = time.Minute

// Start connects every channel in parallel and returns once each has connected or failed;
// a channel takes messages as soon as it connected, not when the others did.
// gateway:startup is emitted once every channel is connected: at once, or when the last one
// that could not connect at start does.
//
// A channel that fails for a reason that may pass (a network error, a timeout, a 5xx or a
// 429: anything its adapter did not mark channels.Permanent) does not fail Start: it is
// shown disconnected (not ready) and started again in the background with capped
// exponential backoff until it connects (its journaled messages are then answered before
// its new ones, its command menu set, and channel:connect emitted) or Stop. This holds when
// every channel fails so: the gateway runs, not ready, and keeps trying. A permanent
// failure (a rejected token, a setting the platform refuses), or ctx cancelled before the
// channels connected, fails Start with the channel's error, and the channels already
// connected are stopped again.
func (g *Gateway) Start(ctx context.Context) error {
	g.stateMu.Lock()
	defer g.stateMu.Unlock()
	if g.started {
		return nil
	}
	if g.stopped {
		return errors.New("gateway: already stopped")
	}
	g.loadReplay()
	errs := make([]error, len(g.channels))
	var wg sync.WaitGroup
	for i, ch := range g.channels {
		wg.Go(func() {
			if errs[i] = ch.Start(ctx, g); errs[i] == nil {
				// Its messages flow now (journaled ones first), not when the slowest
				// channel's first attempt ends: a platform that hangs holds up only its own.
				g.openGate(ch.Name())
			}
		})
	}
	wg.Wait()
	// A Start cancelled (not timed out) is the caller giving up: nothing to try again.
	cancelled := ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded)
	var fatal []error
	for i, ch := range g.channels {
		if errs[i] != nil && (cancelled || errors.Is(errs[i], channels.ErrPermanent)) {
			fatal = append(fatal, fmt.Errorf("channel %s: %w", ch.Name(), errs[i]))
		}
	}
	if len(fatal) > 0 {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i, ch := range g.channels {
			if errs[i] == nil {
				_ = ch.Stop(stopCtx)
			}
		}
		return errors.Join(fatal...)
	}
	g.started = true
	g.ready.Store(true)
	g.retryCtx, g.retryCancel = context.WithCancel(context.Background())
	names := make([]string, 0, len(g.channels))
	var later []string
	for i, ch := range g.channels {
		if errs[i] != nil {
			later = append(later, ch.Name())
			g.startLater(ch, errs[i])
			continue
		}
		names = append(names, ch.Name())
	}
	g.pushCommands(ctx, g.Runtime())
	if len(later) > 0 {
		// gateway:startup waits for them (DESIGN: after every enabled channel is connected).
		g.log.Warn("gateway started; some channels are not connected yet and are retried in the background", "channels", names, "waiting", later)
		return nil
	}
	g.log.Info("gateway started", "channels", names)
	g.emitStartup()
	return nil
}

// emitStartup emits gateway:startup, listing every channel: it comes once all are
// connected, through the lifecycle queue so that it follows their channel:connect.
func (g *Gateway) emitStartup() {
	names := make([]string, len(g.channels))
	for i, ch := range g.channels {
		names[i] = ch.Name()
	}
	g.lifecycle.do(context.Background(), func(ctx context.Context) {
		g.emitLifecycle(ctx, &hooks.GatewayStartup{Channels: names})
	})
}

// startLater shows ch, whose Start failed with err (a failure that may pass), disconnected
// and starts it again in the background. Start holds g.stateMu, so Stop waits for this.
func (g *Gateway) startLater(ch channels.Channel, err error) {
	name := ch.Name()
	g.connMu.Lock()
	g.conn[name] = false // not ready while it is down, as after a lost connection
	g.waiting[name] = true
	g.connMu.Unlock()
	g.log.Warn(name+": cannot connect yet; retrying in the background", "channel", name, "err", err, "retry_in", g.retryWait.first)
	g.retries.Add(1)
	go func() {
		defer g.retries.Done()
		g.retryStart(g.retryCtx, ch)
	}()
}

// retryStart starts ch again and again, with capped exponential backoff and each attempt
// under startAttemptTimeout, until it starts, a failure is permanent, or ctx ends (Stop).
// Once it started, its journaled messages are queued, its new ones let in and its command
// menu set; the adapter's own Connected report emits channel:connect.
func (g *Gateway) retryStart(ctx context.Context, ch channels.Channel) {
	name := ch.Name()
	wait := g.retryWait.first
	for attempt := 2; ; attempt++ {
		if !channels.Sleep(ctx, wait) {
			return
		}
		actx, cancel := context.WithTimeout(ctx, startAttemptTimeout)
		err := ch.Start(actx, g)
		cancel()
		if ctx.Err() != nil {
			return // Stop came: it stops the channel if this attempt started it
		}
		if err == nil {
			g.connMu.Lock()
			delete(g.waiting, name)
			last := len(g.waiting) == 0
			g.connMu.Unlock()
			g.log.Info(name+": connected; it takes messages now", "channel", name, "attempts", attempt)
			g.openGate(name)
			g.menuMu.Lock()
			g.pushMenu(ctx, g.Runtime(), ch)
			g.menuMu.Unlock()
			if last {
				g.emitStartup()
			}
			return
		}
		if errors.Is(err, channels.ErrPermanent) {
			g.log.Error(name+": cannot connect, and trying again will not help; fix the config and restart the gateway", "channel", name, "err", err)
			return
		}
		wait = min(wait*2, g.retryWait.max)
		g.log.Warn(name+": still cannot connect; retrying in the background", "channel", name, "attempt", attempt, "err", err, "retry_in", wait)
	}
}

// isWaiting reports whether channel has not started yet and is retried in the background.
func (g *Gateway) isWaiting(channel string) bool {
	g.connMu.Lock()
	defer g.connMu.Unlock()
	return g.waiting[channel]
}

// Ready reports whether every channel is connected and the gateway takes messages.
func (g *Gateway) Ready() bool {
	return g.notReady(context.Background()) == ""
}

// notReady says why the gateway is not ready; "" when it is.
func (g *Gateway) notReady(ctx context.Context) string {
	switch {
	case g.stopping.Load():
		return "shutting down"
	case !g.ready.Load():
		// Channels answer as soon as they connect; name those a first attempt still holds.
		g.connMu.Lock()
		defer g.connMu.Unlock()
		var waiting []string
		for _, ch := range g.channels {
			if !g.conn[ch.Name()] {
				waiting = append(waiting, ch.Name())
			}
		}
		if len(waiting) == 0 {
			return "starting"
		}
		return "starting: connecting to " + strings.Join(waiting, ", ")
	}
	if g.health != nil {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if err := g.health(ctx); err != nil {
			return err.Error()
		}
	}
	g.connMu.Lock()
	defer g.connMu.Unlock()
	for _, ch := range g.channels {
		if up, seen := g.conn[ch.Name()]; seen && !up {
			return "channel " + ch.Name() + " is disconnected"
		}
	}
	return ""
}

// Stop shuts down: intake stops queuing (a new message is still journaled, for the next
// start to answer; see Deliver), queued and running turns get until ctx's deadline (at
// most 30s when ctx has none) to finish and are then cancelled, notices still queued are
// sent (cut at the same deadline), channels are stopped, the lifecycle events they caused
// are emitted, and Stop returns when every goroutine it owns has ended. It is idempotent,
// and releases the gateway's goroutines after a failed Start too.
func (g *Gateway) Stop(ctx context.Context) error {
	g.stateMu.Lock()
	if g.stopped {
		g.stateMu.Unlock()
		return nil
	}
	g.stopped = true
	started := g.started
	stopRetries := g.retryCancel
	g.stateMu.Unlock()
	if stopRetries != nil {
		stopRetries() // a channel still trying to start gives up now
	}

	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	g.stopping.Store(true)
	if started {
		// A gateway that never started (a dry run, a failed start) announces no stop.
		g.lifecycle.do(ctx, func(context.Context) { g.emitLifecycle(ctx, &hooks.GatewayStop{Reason: "shutdown"}) })
	}
	// The chats with nothing to do go now; the others finish what they have queued and go
	// when their actor parks (see park).
	g.mu.Lock()
	for _, s := range g.sessions {
		if s.idle {
			g.dropSessionLocked(s)
		}
	}
	g.mu.Unlock()

	drained := make(chan struct{})
	go func() { g.actors.Wait(); close(drained) }()
	var errs []error
	select {
	case <-drained:
	case <-ctx.Done():
		g.log.Warn("shutdown deadline reached; cancelling running turns")
		g.cancel(errShutdown)
		select {
		case <-drained:
		case <-time.After(5 * time.Second):
			errs = append(errs, errors.New("gateway: some chat sessions did not stop in time"))
		}
	}
	g.cancel(errShutdown)
	g.notices.close(ctx) // past ctx's deadline the sends still running are cancelled
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A start attempt still running ends with its cancelled context; a channel it started
	// is stopped below with the others.
	retried := make(chan struct{})
	go func() { g.retries.Wait(); close(retried) }()
	select {
	case <-retried:
	case <-stopCtx.Done():
		errs = append(errs, errors.New("gateway: a channel's start attempt did not end in time"))
	}
	for i := len(g.channels) - 1; i >= 0; i-- {
		if err := g.channels[i].Stop(stopCtx); err != nil {
			errs = append(errs, fmt.Errorf("stop channel %s: %w", g.channels[i].Name(), err))
		}
	}
	g.lifecycle.close(stopCtx) // the channel:disconnect of the channels just stopped
	if err := g.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close store: %w", err))
	}
	g.Runtime().retire() // closes it once nothing holds it (idempotent)
	return errors.Join(errs...)
}

// Draining implements channels.Draining: Stop has begun, so a message Deliver takes from now
// on is answered after the restart.
func (g *Gateway) Draining() bool { return g.stopping.Load() }

// Connected implements channels.Sink. It returns at once: the channel:connect or
// channel:disconnect hooks run on the gateway's lifecycle worker, in order.
func (g *Gateway) Connected(channel string, up bool, err error) {
	g.connMu.Lock()
	was, seen := g.conn[channel]
	g.conn[channel] = up
	g.connMu.Unlock()
	if seen && was == up {
		return
	}
	var ev hooks.Event
	if up {
		g.log.Info("channel connected", "channel", channel)
		ev = &hooks.ChannelConnect{Channel: channel}
	} else {
		msg := ""
		if err != nil {
			msg = err.Error()
			g.log.Warn("channel disconnected", "channel", channel, "err", msg)
		} else {
			// A clean stop (shutdown) is no warning and has no error to show.
			g.log.Info("channel disconnected", "channel", channel)
		}
		ev = &hooks.ChannelDisconnect{Channel: channel, Error: msg}
	}
	if !g.lifecycle.submit(func(ctx context.Context) { g.emitLifecycle(ctx, ev) }) {
		g.log.Warn("lifecycle hooks are behind or stopped; this event is not emitted",
			"event", ev.EventName(), "channel", channel, "queue", lifecycleQueue)
	}
}

// emitLifecycle emits ev on the current runtime's bus; it runs on the lifecycle worker.
func (g *Gateway) emitLifecycle(ctx context.Context, ev hooks.Event) {
	rt, release := g.acquire()
	defer release()
	rt.Bus.Emit(ctx, ev)
}

// SessionKey names a chat's session: channel:chat, plus :thread where the platform has threads.
func SessionKey(channel, chat, thread string) string {
	if thread == "" {
		return channel + ":" + chat
	}
	return channel + ":" + chat + ":" + thread
}

// Deliver implements channels.Sink: it journals msg (when a journal is configured: the
// message then survives a crash, so the adapter may acknowledge it) and queues it on its
// chat's session. In cluster mode it publishes msg to the shared intake instead, and the
// process holding the chat queues it (Take); a pinned channel's messages stay here. A full chat queue is answered with a plain notice rather than dropped
// silently; the notice is sent off the caller's goroutine (see refuse), so Deliver never
// waits on hooks or on the platform. An error means the message was not taken: the adapter
// must not acknowledge it, so the platform delivers it again.
func (g *Gateway) Deliver(ctx context.Context, msg *channels.Message) error {
	shared := g.intake != nil && !channels.IsPinned(g.byName[msg.Channel])
	msg.Injected, msg.Inject = false, nil // only the admin API starts such a turn: a chat's message never skips the receive hooks
	// While Stop drains, a message is still taken where it outlives this process (the
	// journal, the shared intake) and answered after the restart: refused, Discord would
	// never offer it again and Slack would offer it only to this closing connection. With
	// neither, the adapter is told to send the user away (ErrStopping).
	draining := g.stopping.Load()
	if draining && !shared && g.journal == nil {
		return channels.ErrStopping
	}
	if !draining {
		// Journaled messages of before the restart go first; a draining gateway queues
		// nothing, so there is no order to keep.
		if err := g.waitGate(ctx, msg.Channel); err != nil {
			return fmt.Errorf("%w: %w", channels.ErrNotAccepted, err)
		}
	}
	dedupKey := ""
	if msg.ID != "" {
		dedupKey = msg.Channel + "|" + msg.ChatID + "|" + msg.ID
		release, err := g.claimDelivery(ctx, dedupKey)
		if err != nil {
			return fmt.Errorf("%w: %w", channels.ErrNotAccepted, err)
		}
		defer release()
		if g.dedup.Seen(dedupKey) {
			g.log.Debug("dropped a redelivered message", "channel", msg.Channel, "chat", msg.ChatID, "id", msg.ID)
			return nil
		}
	}
	if msg.Time.IsZero() {
		msg.Time = time.Now()
	}
	var dup bool
	var err error
	if shared {
		dup, err = g.publish(ctx, msg, dedupKey)
	} else {
		dup, err = g.accept(msg, dedupKey)
	}
	if err != nil {
		if dedupKey != "" {
			g.dedup.Forget(dedupKey)
		}
		if shared {
			// NATS restarting or out of reach: the platform offers the message again in a
			// few seconds, and it is taken once the intake is back. Nothing to tell the user
			// yet; /readyz tells the admin.
			g.log.Warn("the shared intake did not take a message; the platform will offer it again", "channel", msg.Channel, "chat", msg.ChatID, "err", err)
			return fmt.Errorf("%w: %w", channels.ErrNotAccepted, err)
		}
		// Not acknowledged, so the platform offers it again; the user learns why it waits.
		g.log.Error("cannot journal a message; it is not acknowledged to the platform", "channel", msg.Channel, "chat", msg.ChatID, "err", err)
		if dedupKey == "" || !g.journalTold.Seen(dedupKey) {
			g.refuse(msg, "journal", "the intake journal could not store the message: "+err.Error(),
				"I couldn't save your message just now (my storage is failing), so it was not taken. Please send it again in a little while.")
		}
		return fmt.Errorf("%w: %w", channels.ErrNotAccepted, err)
	}
	if dup {
		g.log.Debug("dropped a message accepted before", "channel", msg.Channel, "chat", msg.ChatID, "id", msg.ID)
		return nil
	}
	if shared {
		return nil // queued when it comes back through Take, on whichever process holds the chat
	}
	if g.metrics != nil && msg.MigrateFrom == "" { // the platform's notice, not a message anyone wrote
		g.metrics.MessagesIn.WithLabelValues(msg.Channel).Inc()
	}
	if draining {
		g.log.Info("message taken while shutting down; it is answered after the restart", "channel", msg.Channel, "chat", msg.ChatID, "id", msg.ID)
		return nil
	}
	if err := g.queue(msg); err != nil { // Stop began since the check above
		if g.journal != nil {
			g.log.Info("message taken while shutting down; it is answered after the restart", "channel", msg.Channel, "chat", msg.ChatID, "id", msg.ID)
			return nil
		}
		if dedupKey != "" {
			g.dedup.Forget(dedupKey)
		}
		return err
	}
	return nil
}

// claimDelivery makes the Deliver calls of one message take turns: a second delivery of
// it (Telegram's two notices of a group's new id, a platform's redelivery) that comes
// while the first is still being stored waits for that one to end. Dropped at once, it
// would let the adapter go on to the chat's next message, which could then be queued
// ahead of the first; and were the first refused, the second would be acknowledged with
// neither taken. It returns what ends the caller's turn.
func (g *Gateway) claimDelivery(ctx context.Context, key string) (release func(), err error) {
	for {
		g.takingMu.Lock()
		busy, ok := g.taking[key]
		if !ok {
			done := make(chan struct{})
			g.taking[key] = done
			g.takingMu.Unlock()
			return func() {
				g.takingMu.Lock()
				delete(g.taking, key)
				g.takingMu.Unlock()
				close(done)
			}, nil
		}
		g.takingMu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// queue puts an accepted (journaled) message on its chat's session, or answers why it
// cannot; either way the message is taken: it stays journaled until answered. Once Stop
// began it queues nothing and returns channels.ErrStopping: the message stays where it is (the
// journal, the shared intake) for after the restart.
func (g *Gateway) queue(msg *channels.Message) error {
	key := SessionKey(msg.Channel, msg.ChatID, msg.ThreadID)
	queued, err := g.enqueue(key, msg)
	if errors.Is(err, channels.ErrStopping) {
		return err
	}
	if msg.MigrateFrom != "" && (err != nil || !queued) {
		// Nobody wrote it, so nobody is told: it stays journaled, and is taken after a restart.
		g.log.Warn("no room to take the news that a chat's id changed now; it is taken after a restart",
			"session", key, "old_chat", msg.MigrateFrom, "err", err)
		return nil
	}
	if err != nil {
		// Every chat slot is busy: tell the user rather than leave them unanswered.
		g.refuse(msg, "capacity", fmt.Sprintf("too many active chats (sessions.max_sessions: %d); the message was not taken", g.cfg.MaxSessions),
			"I'm talking with too many people at once right now. Please send this again in a few minutes.")
		return nil
	}
	if !queued {
		g.refuse(msg, "queue_full", fmt.Sprintf("the chat's queue is full (sessions.queue_size: %d); the message was not taken", g.cfg.QueueSize),
			"I'm still working through your earlier messages, so I couldn't take this one. Please send it again in a moment.")
	}
	return nil
}

var errTooManyChats = fmt.Errorf("%w: too many active chats", channels.ErrNotAccepted)

// enqueue puts msg on its session's mailbox, creating the session when needed, and wakes
// its actor.
func (g *Gateway) enqueue(key string, msg *channels.Message) (queued bool, err error) {
	stop := !msg.Injected && isStop(msg) // outside g.mu: it joins the message's text
	g.mu.Lock()
	defer g.mu.Unlock()
	// Checked under g.mu, which Stop takes after setting stopping: a message either is
	// queued before Stop looks at the sessions (and is drained with them), or not at all.
	if g.stopping.Load() {
		return false, channels.ErrStopping
	}
	s, err := g.sessionLocked(key)
	if err != nil {
		return false, err
	}
	if stop {
		s.stopAhead()
	}
	select {
	case s.mailbox <- msg:
		g.wakeLocked(s)
		return true, nil
	default:
		return false, nil
	}
}

// isStop reports whether msg is the /stop command.
func isStop(msg *channels.Message) bool {
	cmd, _, ok := parseCommand(strings.TrimSpace(msg.Text()))
	return ok && cmd == "stop"
}

// stopAhead lets a /stop overtake the message the chat is taking in (control commands
// bypass the queue, DESIGN's rule 2): its receive hooks, which may run for seconds (a slow
// filter, speech to text), are cancelled and the message dropped, as /stop drops the
// queued ones.
func (s *session) stopAhead() {
	if f := s.stopIntake.Load(); f != nil {
		(*f)(errStopIntake)
	}
}

// sessionLocked finds key's session, creating one when needed (making room by evicting an
// idle one); g.mu is held. Its actor starts with the first thing queued for it (wakeLocked).
func (g *Gateway) sessionLocked(key string) (*session, error) {
	if s, ok := g.sessions[key]; ok {
		return s, nil
	}
	if len(g.sessions) >= g.cfg.MaxSessions && !g.evictOneLocked() {
		return nil, errTooManyChats
	}
	s := newSession(g, key)
	if held, ok := g.heldNext[key]; ok {
		s.nextTurn = held
		delete(g.heldNext, key)
	}
	g.sessions[key] = s
	if g.metrics != nil {
		g.metrics.ActiveSessions.Set(float64(len(g.sessions)))
	}
	return s, nil
}

// evictOneLocked lets one idle session go; it reports whether room was made.
func (g *Gateway) evictOneLocked() bool {
	for _, s := range g.sessions {
		if s.idle {
			g.dropSessionLocked(s)
			return true
		}
	}
	return false
}

// dropSessionLocked takes s out of g.sessions: the next message for its chat starts a new
// session, which reads the history from the store. g.mu is held; s's loop is not running
// (parked, or ending).
func (g *Gateway) dropSessionLocked(s *session) {
	if s.closed {
		return
	}
	s.closed, s.idle = true, false
	if s.evictTimer != nil {
		s.evictTimer.Stop()
	}
	if len(s.nextTurn) > 0 {
		// Accepted and journaled: they wait for the chat's next turn, in whichever session.
		if g.heldNext == nil {
			g.heldNext = map[string][]nextText{}
		}
		g.heldNext[s.key] = s.nextTurn
		s.nextTurn = nil
	}
	if g.sessions[s.key] == s {
		delete(g.sessions, s.key)
	}
	if g.metrics != nil {
		g.metrics.ActiveSessions.Set(float64(len(g.sessions)))
	}
}

// provider returns a cached provider for the effective config.
func (g *Gateway) provider(cfg harness.Config) (harness.Provider, error) {
	g.provMu.Lock()
	defer g.provMu.Unlock()
	if p, ok := g.providers[cfg]; ok {
		return p, nil
	}
	p, err := g.newProv(cfg)
	if err != nil {
		return nil, err
	}
	if len(g.providers) < 256 { // one per distinct profile config in practice
		g.providers[cfg] = p
	}
	return p, nil
}

// notify sends a one-shot notice (a lone done frame) to the message's chat; a failure is
// emitted on bus, the bus of the runtime the message was taken with.
func (g *Gateway) notify(ctx context.Context, bus *hooks.Bus, target channels.Target, text string) (shown bool) {
	ch, ok := g.byName[target.Channel]
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	st, err := ch.Open(ctx, target)
	if err == nil {
		err = st.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: text})
	}
	if err != nil {
		g.deliveryFailed(bus, sessionOf(target), err)
		return false
	}
	return true
}

// refuse handles a message Deliver could not take (reason is the metric label, errText
// what gateway:error says, userText what the chat is told). It is called on the adapter's
// intake goroutine, so it only counts, logs and queues: the gateway:error event and the
// notice run on the notice workers. While a notice to the chat is on its way, further
// refusals of that chat are logged and counted, but neither emitted nor told again.
func (g *Gateway) refuse(msg *channels.Message, reason, errText, userText string) {
	if g.metrics != nil {
		g.metrics.Rejected.WithLabelValues(msg.Channel, reason).Inc()
	}
	target := channels.TargetOf(msg)
	key := SessionKey(target.Channel, target.ChatID, target.ThreadID)
	g.log.Warn("message not taken", "session", key, "id", msg.ID, "reason", errText)
	g.noticeMu.Lock()
	if g.noticing[key] {
		g.noticeMu.Unlock()
		g.settle(msg.Seq)
		return
	}
	g.noticing[key] = true
	g.noticeMu.Unlock()
	done := func() {
		g.noticeMu.Lock()
		delete(g.noticing, key)
		g.noticeMu.Unlock()
	}
	ok := g.notices.submit(func(ctx context.Context) {
		defer done()
		defer g.settle(msg.Seq)    // refused and told: it is not answered again after a restart
		rt, release := g.acquire() // once for the message: its event and its notice
		defer release()
		info := sessionOf(target)
		info.UserID = msg.UserID
		info.Profile = rt.Profiles.Resolve(msg.Channel, msg.ChatID, msg.ThreadID, msg.UserID).Name
		rt.Bus.Emit(ctx, &hooks.GatewayError{Session: info, Stage: "receive", Error: errText})
		g.notify(ctx, rt.Bus, target, userText)
	})
	if !ok {
		done()
		g.settle(msg.Seq)
		g.log.Warn("too many notices waiting, or shutting down; the chat is not told", "session", key, "queue", noticeQueue)
	}
}

// reject answers a message the chat's session did not pass on to the model; it runs on
// the session's own goroutine, with the runtime the message was taken with.
func (g *Gateway) reject(msg *channels.Message, bus *hooks.Bus, reason, text string) {
	if g.metrics != nil {
		g.metrics.Rejected.WithLabelValues(msg.Channel, reason).Inc()
	}
	g.notify(g.ctx, bus, channels.TargetOf(msg), text)
}

// deliveryFailed logs, counts and emits on bus a failed send to the chat of info.
func (g *Gateway) deliveryFailed(bus *hooks.Bus, info hooks.Session, err error) {
	g.log.Error("delivery failed", "channel", info.Channel, "chat", info.ChatID, "err", err)
	if g.metrics != nil {
		g.metrics.DeliveryErrors.WithLabelValues(info.Channel).Inc()
	}
	bus.Emit(context.Background(), &hooks.GatewayError{Session: info, Stage: "delivery", Error: err.Error()})
}

// sessionOf names the chat of a target for an event that has no turn behind it.
func sessionOf(t channels.Target) hooks.Session {
	return hooks.Session{SessionKey: SessionKey(t.Channel, t.ChatID, t.ThreadID), Channel: t.Channel, ChatID: t.ChatID, ThreadID: t.ThreadID}
}
