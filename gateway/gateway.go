package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"gateway/channels"
	"gateway/harness"
	"gateway/hooks"
	"gateway/profiles"
)

// Runtime is the reloadable part of the gateway: the hook bus with its handlers, the
// profiles and bindings, and the global model settings. A turn takes a snapshot of the
// runtime when it starts and keeps it to the end, so a reload never changes a turn in flight.
type Runtime struct {
	Bus      *hooks.Bus
	Profiles *profiles.Set
	LLM      harness.Config
	// VoiceReplies tells whether a text-to-speech hook is configured, so /voice can say so.
	VoiceReplies bool
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
	Store *harness.Store
	// NewProvider builds a provider for an effective llm config (global merged with the profile's).
	NewProvider func(harness.Config) (harness.Provider, error)
	Logger      *slog.Logger
	Metrics     *Metrics
}

// Gateway routes messages between channels and per-chat sessions. Its zero value is not usable; call New.
type Gateway struct {
	cfg     Config
	log     *slog.Logger
	store   *harness.Store
	metrics *Metrics
	newProv func(harness.Config) (harness.Provider, error)

	rt atomic.Pointer[Runtime]

	channels []channels.Channel
	byName   map[string]channels.Channel

	provMu    sync.Mutex
	providers map[harness.Config]harness.Provider

	mu       sync.Mutex
	sessions map[string]*session

	dedup    *channels.Dedup
	turnSem  chan struct{}
	actors   sync.WaitGroup
	ctx      context.Context // lives until Stop's deadline: cancelling it aborts turns
	cancel   context.CancelCauseFunc
	draining chan struct{} // closed when Stop begins: actors finish their queue and exit

	stateMu  sync.Mutex
	started  bool
	stopped  bool
	ready    atomic.Bool
	stopping atomic.Bool
	connMu   sync.Mutex
	conn     map[string]bool
}

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
	cfg = cfg.withDefaults()
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	g := &Gateway{
		cfg:       cfg,
		log:       log,
		store:     deps.Store,
		metrics:   deps.Metrics,
		newProv:   deps.NewProvider,
		byName:    map[string]channels.Channel{},
		providers: map[harness.Config]harness.Provider{},
		sessions:  map[string]*session{},
		dedup:     channels.NewDedup(10_000),
		turnSem:   make(chan struct{}, cfg.MaxConcurrentTurns),
		ctx:       ctx,
		cancel:    cancel,
		draining:  make(chan struct{}),
		conn:      map[string]bool{},
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
	if old := g.rt.Swap(rt); old != nil && old != rt {
		old.retire()
	}
}

// acquire returns the current runtime, counted as in use until release.
func (g *Gateway) acquire() (rt *Runtime, release func()) {
	for {
		rt = g.rt.Load()
		if rt.enter() {
			return rt, rt.leave
		}
		// Replaced between the load and enter: the new one is already stored.
	}
}

// Start connects every channel in parallel and returns once all are connected; then it
// emits gateway:startup. A channel that fails to connect fails Start with its error, and
// the channels already connected are stopped again.
func (g *Gateway) Start(ctx context.Context) error {
	g.stateMu.Lock()
	defer g.stateMu.Unlock()
	if g.started {
		return nil
	}
	if g.stopped {
		return errors.New("gateway: already stopped")
	}
	errs := make([]error, len(g.channels))
	var wg sync.WaitGroup
	for i, ch := range g.channels {
		wg.Go(func() {
			if err := ch.Start(ctx, g); err != nil {
				errs[i] = fmt.Errorf("channel %s: %w", ch.Name(), err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i, ch := range g.channels {
			if errs[i] == nil {
				_ = ch.Stop(stopCtx)
			}
		}
		return err
	}
	g.started = true
	g.ready.Store(true)
	names := make([]string, 0, len(g.channels))
	for _, ch := range g.channels {
		names = append(names, ch.Name())
	}
	g.log.Info("gateway started", "channels", names)
	g.Runtime().Bus.Emit(context.Background(), &hooks.GatewayStartup{Channels: names})
	return nil
}

// Ready reports whether every channel is connected and the gateway takes messages.
func (g *Gateway) Ready() bool {
	if !g.ready.Load() || g.stopping.Load() {
		return false
	}
	g.connMu.Lock()
	defer g.connMu.Unlock()
	for _, ch := range g.channels {
		if up, seen := g.conn[ch.Name()]; seen && !up {
			return false
		}
	}
	return true
}

// Stop shuts down: intake stops, queued and running turns get until ctx's deadline (at
// most 30s when ctx has none) to finish and are then cancelled, channels are stopped, and
// Stop returns when every goroutine it owns has ended. It is idempotent.
func (g *Gateway) Stop(ctx context.Context) error {
	g.stateMu.Lock()
	if g.stopped {
		g.stateMu.Unlock()
		return nil
	}
	g.stopped = true
	started := g.started
	g.stateMu.Unlock()

	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	g.stopping.Store(true)
	if started {
		// A gateway that never started (a dry run, a failed start) announces no stop.
		g.Runtime().Bus.Emit(ctx, &hooks.GatewayStop{Reason: "shutdown"})
	}
	close(g.draining)

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
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := len(g.channels) - 1; i >= 0; i-- {
		if err := g.channels[i].Stop(stopCtx); err != nil {
			errs = append(errs, fmt.Errorf("stop channel %s: %w", g.channels[i].Name(), err))
		}
	}
	if err := g.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close store: %w", err))
	}
	g.Runtime().retire() // closes it once nothing holds it (idempotent)
	return errors.Join(errs...)
}

// Connected implements channels.Sink.
func (g *Gateway) Connected(channel string, up bool, err error) {
	g.connMu.Lock()
	was, seen := g.conn[channel]
	g.conn[channel] = up
	g.connMu.Unlock()
	if seen && was == up {
		return
	}
	bus := g.Runtime().Bus
	if up {
		g.log.Info("channel connected", "channel", channel)
		bus.Emit(context.Background(), &hooks.ChannelConnect{Channel: channel})
		return
	}
	msg := ""
	if err != nil {
		msg = err.Error()
		g.log.Warn("channel disconnected", "channel", channel, "err", msg)
	} else {
		// A clean stop (shutdown) is no warning and has no error to show.
		g.log.Info("channel disconnected", "channel", channel)
	}
	bus.Emit(context.Background(), &hooks.ChannelDisconnect{Channel: channel, Error: msg})
}

// SessionKey names a chat's session: channel:chat, plus :thread where the platform has threads.
func SessionKey(channel, chat, thread string) string {
	if thread == "" {
		return channel + ":" + chat
	}
	return channel + ":" + chat + ":" + thread
}

// Deliver implements channels.Sink: it queues msg on its chat's session. A full chat queue is
// answered with a plain notice rather than dropped silently.
func (g *Gateway) Deliver(ctx context.Context, msg *channels.Message) error {
	if g.stopping.Load() {
		return channels.ErrNotAccepted
	}
	if msg.ID != "" && g.dedup.Seen(msg.Channel+"|"+msg.ChatID+"|"+msg.ID) {
		g.log.Debug("dropped a redelivered message", "channel", msg.Channel, "chat", msg.ChatID, "id", msg.ID)
		return nil
	}
	if msg.Time.IsZero() {
		msg.Time = time.Now()
	}
	if g.metrics != nil {
		g.metrics.MessagesIn.WithLabelValues(msg.Channel).Inc()
	}
	key := SessionKey(msg.Channel, msg.ChatID, msg.ThreadID)
	queued, err := g.enqueue(key, msg)
	if errors.Is(err, errTooManyChats) {
		// Every chat slot is busy: tell the user rather than leave them unanswered.
		g.receiveFailed(msg, fmt.Sprintf("too many active chats (sessions.max_sessions: %d); the message was not taken", g.cfg.MaxSessions))
		g.reject(msg, "capacity", "I'm talking with too many people at once right now. Please send this again in a few minutes.")
		return nil
	}
	if err != nil {
		if msg.ID != "" {
			g.dedup.Forget(msg.Channel + "|" + msg.ChatID + "|" + msg.ID)
		}
		return err
	}
	if !queued {
		g.receiveFailed(msg, fmt.Sprintf("the chat's queue is full (sessions.queue_size: %d); the message was not taken", g.cfg.QueueSize))
		g.reject(msg, "queue_full", "I'm still working through your earlier messages, so I couldn't take this one. Please send it again in a moment.")
	}
	return nil
}

var errTooManyChats = fmt.Errorf("%w: too many active chats", channels.ErrNotAccepted)

// enqueue puts msg on its session's mailbox, creating the session actor when needed.
func (g *Gateway) enqueue(key string, msg *channels.Message) (queued bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.sessions[key]
	if !ok {
		if len(g.sessions) >= g.cfg.MaxSessions && !g.evictOneLocked() {
			return false, errTooManyChats
		}
		s = newSession(g, key)
		g.sessions[key] = s
		if g.metrics != nil {
			g.metrics.ActiveSessions.Set(float64(len(g.sessions)))
		}
		g.actors.Add(1)
		go s.loop()
	}
	select {
	case s.mailbox <- msg:
		return true, nil
	default:
		return false, nil
	}
}

// evictOneLocked asks one idle session to go; it reports whether room was made.
func (g *Gateway) evictOneLocked() bool {
	for key, s := range g.sessions {
		if s.idle.Load() {
			s.closed = true
			close(s.evict)
			delete(g.sessions, key)
			return true
		}
	}
	return false
}

// removeSession drops s from the map if it is idle and its mailbox is empty; it reports
// whether s may exit. Holding g.mu makes this atomic with enqueue.
func (g *Gateway) removeSession(s *session) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s.closed {
		return true
	}
	if len(s.mailbox) > 0 {
		return false
	}
	s.closed = true
	delete(g.sessions, s.key)
	if g.metrics != nil {
		g.metrics.ActiveSessions.Set(float64(len(g.sessions)))
	}
	return true
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

// notify sends a one-shot notice (a lone done frame) to the message's chat.
func (g *Gateway) notify(ctx context.Context, target channels.Target, text string) {
	ch, ok := g.byName[target.Channel]
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	st, err := ch.Open(ctx, target)
	if err == nil {
		err = st.Send(ctx, channels.Frame{Type: channels.FrameDone, Text: text})
	}
	if err != nil {
		g.deliveryFailed(g.Runtime().Bus, sessionOf(target), err)
	}
}

// receiveFailed emits gateway:error at the receive stage for a message that could not be
// taken. It runs on the adapter's intake loop, so observers get a short, fixed budget.
func (g *Gateway) receiveFailed(msg *channels.Message, text string) {
	ctx, cancel := context.WithTimeout(g.ctx, 2*time.Second)
	defer cancel()
	rt := g.Runtime()
	info := sessionOf(channels.TargetOf(msg))
	info.UserID = msg.UserID
	info.Profile = rt.Profiles.Resolve(msg.Channel, msg.ChatID, msg.ThreadID, msg.UserID).Name
	rt.Bus.Emit(ctx, &hooks.GatewayError{Session: info, Stage: "receive", Error: text})
}

func (g *Gateway) reject(msg *channels.Message, reason, text string) {
	if g.metrics != nil {
		g.metrics.Rejected.WithLabelValues(msg.Channel, reason).Inc()
	}
	g.notify(g.ctx, channels.TargetOf(msg), text)
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
