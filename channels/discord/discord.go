// Package discord is the Discord adapter: the gateway WebSocket for inbound messages and
// the REST API for answers, both through discordgo v0.29.0.
//
// discordgo keeps its endpoints in package-level variables; we leave them alone and route
// the session's HTTP client through a transport that rewrites discord.com to api_url. The
// gateway URL comes from GET /gateway, which api_url answers. discordgo's own reconnect
// loop has no way to stop, so it is switched off: a supervisor goroutine owned by the
// Channel reopens the session (RESUME first; discordgo identifies again when the resume is
// refused) with backoff, until Stop.
//
// Discord never redelivers. When a session could not be resumed (READY after a loss, not
// RESUMED), what was posted meanwhile in the DMs and threads the bot was active in is
// read over REST, bounded, and handled like gateway messages: see catchup.go. With
// Options.State the cursors it reads from are stored, so that a restart catches up too.
//
// With Options.Holder (cluster mode) the gateway session is held by one process at a time
// and moves when the hold does: see hold.go.
package discord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/gorilla/websocket"

	"gateway/channels"
	"gateway/internal/pace"
)

// Name is the channel name in messages, session keys and config.
const Name = "discord"

const (
	maxLen          = 2000 // characters (runes) in one message
	requestTimeout  = 30 * time.Second
	optionalTimeout = 10 * time.Second // one typing call or streaming preview
	inboxSize       = 256
	mediaMaxAge     = 24 * time.Hour
	discordLogOff   = -1 // below discordgo.LogError: discordgo logs through the std logger, not slog
)

var (
	errTokenRejected = errors.New("discord: the bot token was rejected (401); check channels.discord.token")
	errConnLost      = errors.New("discord: gateway connection lost")
)

// Options are the parts of a Channel that come from the gateway, not from config.
type Options struct {
	Logger     *slog.Logger
	StateDir   string       // downloads go to StateDir/discord/media
	HTTPClient *http.Client // base transport and timeout for REST; nil: defaults
	// Holder, when set (cluster mode), gives the gateway connection to one process at a
	// time ("conn.discord.<bot id>"): the others wait for it and still send over REST.
	Holder channels.Holder
	// State, when set, keeps the catch-up cursors (the last message seen in each recently
	// active DM and thread) across restarts and processes, so that whoever connects next
	// reads what was posted while nobody was connected. Nil: in memory, as before.
	State channels.State
}

// Channel is the Discord adapter. See channels.Channel for the contract.
type Channel struct {
	cfg         Config
	log         *slog.Logger
	token       string
	scrub       channels.Scrubber // hides token in errors and logs
	api         *url.URL
	client      *http.Client // REST (discordgo) and attachment downloads
	dialer      *dialer
	mediaDir    string
	send        channels.Sender // every REST call: sends to a chat, look-ups, Start's check
	optional    channels.Sender // send's Pacer, one short attempt: typing, streaming previews
	dedup       *channels.Dedup
	guard       *botGuard
	strangers   *channels.NoticeLimiter // who was told lately that they are not on allow_from
	notices     channels.Notices        // not-allowed notices being sent, off the intake worker
	chans       *cache[chanInfo]
	roles       *cache[[]string]
	names       *cache[string] // names of mentioned channels ("c/id") and roles ("r/guild/id")
	botID       atomic.Pointer[string]
	holder      channels.Holder // nil: connect in Start, as a single process
	state       channels.State  // nil: cursors in memory only
	typingEvery time.Duration   // typing refresh; a field so that a test can shorten it

	life  *channels.Lifecycle
	s     *discordgo.Session // made by New, opened by Start; a Channel is never restarted
	sink  channels.Sink      // set by Start before any goroutine that reads it
	inbox chan inbound
	lost  chan struct{}
	// pending are deferred interactions (application commands) waiting for their answer.
	pending interactions
	// gap is set when the session is lost and cleared by RESUMED: a READY while it is set
	// is a fresh session after a failed RESUME, whose missed messages Discord never sends.
	gap atomic.Bool
	// down says the sink was last told the connection is lost, so that a process giving
	// up the hold can say it is ready again (it still sends).
	down atomic.Bool
	book book // catch-up cursors; see catchup.go and state.go
	// workDone is closed when the work goroutine of the current Start ends.
	workDone chan struct{}

	held *channels.HeldWhere // with a Holder: the gateway connection, held by one process at a time
}

// New checks cfg and builds a Channel; it connects nothing until Start.
func New(cfg Config, opts Options) (*Channel, error) {
	cfg.Enabled = true // New means use it: Validate then demands a token
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Channel{
		cfg:    cfg,
		log:    log.With("channel", Name),
		token:  cfg.token(),
		scrub:  channels.NewScrubber(cfg.token()),
		dialer: newDialer(),
		// A stranger writing again is not told again for an hour: every DM would answer.
		strangers: channels.Strangers(opts.State, Name),
		// Discord allows 5 messages per 5 s per channel and 50 requests/s overall.
		send: channels.Sender{
			Pacer:    pace.New(pace.Limits{Global: 40, GlobalBurst: 40, PerKey: 1, PerKeyBurst: 5}),
			Policy:   pace.Policy{Attempts: 5, Base: 500 * time.Millisecond, Max: time.Minute},
			Timeout:  requestTimeout,
			Classify: retryable,
		},
		dedup:       channels.NewDedup(4096),
		guard:       newBotGuard(),
		chans:       newCache[chanInfo](4096, time.Hour),
		roles:       newCache[[]string](1024, 10*time.Minute),
		names:       newCache[string](4096, time.Hour),
		inbox:       make(chan inbound, inboxSize),
		book:        newBook(),
		holder:      opts.Holder,
		state:       opts.State,
		typingEvery: typingEvery,
		lost:        make(chan struct{}, 1),
		life:        channels.NewLifecycle(Name),
	}
	c.held = &channels.HeldWhere{Holder: opts.Holder, Log: c.log, Here: "discord: gateway connection here",
		Elsewhere: "discord: gateway connection held elsewhere; this process still sends"}
	c.send.Scrub = c.scrub
	c.send.OnHold = func(key string, d time.Duration) {
		c.log.Warn("discord: rate limited; holding sends to the channel", "chat_id", key, "wait", d)
	}
	// Sharing the Pacer, a 429 on either Sender holds the chat for both.
	c.optional = c.send
	c.optional.Policy, c.optional.Timeout = pace.Policy{Attempts: 1}, optionalTimeout
	if cfg.APIURL != "" {
		c.api, _ = url.Parse(cfg.APIURL) // Validate checked it
	}
	var base http.RoundTripper = http.DefaultTransport.(*http.Transport).Clone()
	own := true
	timeout := requestTimeout
	if hc := opts.HTTPClient; hc != nil {
		if hc.Transport != nil {
			base, own = hc.Transport, false
		}
		if hc.Timeout > 0 {
			timeout = hc.Timeout
		}
	}
	c.client = &http.Client{Transport: &transport{base: base, api: c.api, ownBase: own}, Timeout: timeout}
	dir := opts.StateDir
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "gateway")
	}
	c.mediaDir = filepath.Join(dir, "discord", "media")
	c.s = c.newSession()
	return c, nil
}

// Name is "discord".
func (c *Channel) Name() string { return Name }

func (c *Channel) bot() string {
	if p := c.botID.Load(); p != nil {
		return *p
	}
	return ""
}

func (c *Channel) newSession() *discordgo.Session {
	s, _ := discordgo.New("Bot " + c.token) // v0.29.0's New cannot fail
	s.Client = c.client
	s.Dialer = &websocket.Dialer{NetDialContext: c.dialer.dial, HandshakeTimeout: 15 * time.Second, Proxy: http.ProxyFromEnvironment}
	s.UserAgent = "DiscordBot (https://github.com/bwmarrin/discordgo, v" + discordgo.VERSION + ") gateway"
	s.ShouldRetryOnRateLimit = false // our Sender honours retry_after, bounded
	s.MaxRestRetries = 0             // likewise for 5xx
	s.ShouldReconnectOnError = false // its loop cannot be stopped; supervise does it
	s.StateEnabled = false           // we need no guild cache; it would only grow
	s.SyncEvents = true              // handlers run on discordgo's reader, in order, no stray goroutines
	s.LogLevel = discordLogOff
	s.Compress, s.Identify.Compress = false, false
	s.Identify.Intents = discordgo.IntentsGuildMessages | discordgo.IntentsDirectMessages | discordgo.IntentsMessageContent
	s.AddHandler(func(_ *discordgo.Session, r *discordgo.Ready) {
		if r.User != nil {
			id := r.User.ID
			c.botID.Store(&id)
		}
		c.up("ready")
		if c.gap.Swap(false) {
			// Queued before any message of the new session, so it is handled first.
			c.enqueue(inbound{catchUp: true})
		}
	})
	s.AddHandler(func(_ *discordgo.Session, _ *discordgo.Resumed) {
		c.gap.Store(false) // Discord replays what was missed
		c.up("resumed")
	})
	s.AddHandler(func(_ *discordgo.Session, _ *discordgo.Disconnect) {
		if c.life.Running() {
			c.gap.Store(true)
			select {
			case c.lost <- struct{}{}:
			default:
			}
		}
	})
	// Messages are read from the raw event, not discordgo's MessageCreate: see decodeMessage.
	s.AddHandler(func(_ *discordgo.Session, e *discordgo.Event) {
		if e.Type == "INTERACTION_CREATE" {
			c.interaction(c.life.Context(), e.RawData)
			return
		}
		if e.Type != "MESSAGE_CREATE" {
			return
		}
		m, err := decodeMessage(e.RawData)
		if err != nil {
			c.log.Warn("discord: an incoming message could not be read", "seq", e.Sequence, "err", err)
			return
		}
		c.enqueue(inbound{m: m})
	})
	return s
}

// enqueue hands an item to the work loop. Blocking here holds back discordgo's reader:
// backpressure instead of loss. Events come only after Start's Begin, so the run
// context is set.
func (c *Channel) enqueue(in inbound) {
	select {
	case c.inbox <- in:
	case <-c.life.Context().Done():
	}
}

func (c *Channel) up(how string) {
	c.log.Info("discord: connected", "how", how)
	c.down.Store(false)
	c.sink.Connected(Name, true, nil)
}

// Start checks the token over REST, connects the gateway and returns after READY. With a
// Holder it returns after the check: the gateway is connected while this process holds it.
func (c *Channel) Start(ctx context.Context, sink channels.Sink) error {
	run, err := c.life.Begin()
	if err != nil {
		return err
	}
	c.sink = sink
	// A Start after a failed one starts afresh: a work loop of its own, no stale loss.
	workDone := make(chan struct{})
	c.workDone = workDone
	select {
	case <-c.lost:
	default:
	}
	c.life.Go(func(ctx context.Context) { c.work(ctx, workDone) })

	c.pruneMedia()
	var me *discordgo.User
	status := 0 // of the last attempt
	err = c.send.Do(ctx, "", func(ctx context.Context) (err error) {
		me, err = c.s.User("@me", discordgo.WithContext(ctx))
		status = restStatus(err)
		return unwrapURL(err)
	})
	if err != nil {
		c.fail()
		switch {
		case status == http.StatusUnauthorized:
			return channels.Permanent(errTokenRejected)
		case status >= 400 && status < 500 && status != http.StatusTooManyRequests:
			// Not an outage: the token or api_url is wrong, and trying again will not help.
			return channels.Permanent(fmt.Errorf("discord: the Discord API at %s refused the bot's token check: %w", c.apiHost(), err))
		}
		return fmt.Errorf("discord: cannot reach the Discord API at %s: %w", c.apiHost(), err)
	}
	id := me.ID
	c.botID.Store(&id)
	c.book.name = "discord.catchup." + id
	if c.state != nil {
		c.life.Go(c.flushLoop)
	}
	if c.holder != nil {
		// Sending works here whether or not this process gets the connection.
		c.sink.Connected(Name, true, nil)
		if !c.life.Go(c.holdLoop) {
			return errors.New("discord: stopped while starting")
		}
		c.log.Info("discord: started; the gateway connection goes to the process holding it", "bot", me.Username, "bot_id", me.ID)
		return nil
	}
	// With State, what was posted while the gateway was not running is read once READY
	// comes, from the stored cursors.
	c.gap.Store(c.state != nil)
	// A Stop during Start ends the connect step too.
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	defer context.AfterFunc(run, ocancel)()
	if err := c.open(octx); err != nil {
		// Open may have won a race with the cancel (the socket and its heartbeat are up when
		// the Stop lands): close whatever it opened, then end the rest.
		c.disconnect()
		c.fail()
		return c.gatewayError(err)
	}
	if !c.life.Go(c.supervise) {
		c.disconnect() // Stop came while the socket opened: it may not have seen it
		return errors.New("discord: stopped while starting")
	}
	c.log.Info("discord: started", "bot", me.Username, "bot_id", me.ID)
	return nil
}

// fail undoes a failed Start: its goroutines end and its REST connections close.
func (c *Channel) fail() {
	c.life.Fail()
	c.client.CloseIdleConnections()
}

func (c *Channel) apiHost() string {
	if c.api != nil {
		return c.api.Host
	}
	return "discord.com"
}

// open runs discordgo's Open under ctx: Open has no context, so ctx ending closes the
// socket it is blocked on. The goroutine always ends before open returns.
func (c *Channel) open(ctx context.Context) error {
	defer c.dialer.bind(ctx)()
	done := make(chan error, 1)
	go func() { done <- c.s.Open() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		c.dialer.closeAll()
		<-done
		return ctx.Err()
	}
}

// fatalClose reports gateway close codes that no retry can fix.
func fatalClose(err error) (int, bool) {
	var ce *websocket.CloseError
	if !errors.As(err, &ce) {
		return 0, false
	}
	switch ce.Code {
	case 4004, 4010, 4011, 4012, 4013, 4014:
		return ce.Code, true
	}
	return ce.Code, false
}

func (c *Channel) gatewayError(err error) error {
	code, fatal := fatalClose(err)
	switch {
	case code == 4004:
		return channels.Permanent(errTokenRejected)
	case code == 4014:
		return channels.Permanent(errors.New("discord: the gateway refused the message intents (4014); enable the Message Content Intent for this bot in the Discord Developer Portal (Bot page)"))
	case fatal:
		return channels.Permanent(fmt.Errorf("discord: the gateway refused the connection (close code %d)", code))
	}
	return fmt.Errorf("discord: cannot connect to the gateway: %w", c.scrub.Wrap(unwrapURL(err)))
}

// unwrapURL drops net/http's "Get https://discord.com/...:" prefix: with api_url set that
// URL is not where the request went, and the operation is named by our own message.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// supervise reconnects after every loss, RESUME first, with capped backoff, until ctx
// ends or the gateway refuses for good.
func (c *Channel) supervise(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.lost:
		}
		// discordgo's heartbeat goroutine may Close an already closed session once more
		// after a drop, emitting a second Disconnect; by then we may be connected again.
		// Only the socket tells: it is closed before Disconnect is emitted.
		if c.dialer.live() > 0 {
			continue
		}
		c.log.Warn("discord: gateway connection lost; reconnecting")
		c.down.Store(true)
		c.sink.Connected(Name, false, errConnLost)
		if !c.reconnect(ctx, 250*time.Millisecond) {
			return
		}
	}
}

// reconnect opens the session after wait, then again with capped backoff, until it is
// open (true), ctx ends or the gateway refuses for good (false; reported to the sink).
func (c *Channel) reconnect(ctx context.Context, wait time.Duration) bool {
	for attempt := 1; ; attempt++ {
		if !channels.Sleep(ctx, wait) {
			return false
		}
		err := c.open(ctx)
		if err == nil || errors.Is(err, discordgo.ErrWSAlreadyOpen) {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if _, fatal := fatalClose(err); fatal {
			err = c.gatewayError(err)
			c.log.Error("discord: giving up on the gateway", "err", err)
			c.down.Store(true)
			c.sink.Connected(Name, false, err)
			return false
		}
		c.log.Warn("discord: reconnect failed", "attempt", attempt, "err", c.scrub.Wrap(err))
		if !c.down.Swap(true) {
			// A holder's first connect failed: nobody receives, as after a loss.
			c.sink.Connected(Name, false, c.gatewayError(err))
		}
		wait = min(max(wait*2, 250*time.Millisecond), 2*time.Minute)
	}
}

// Stop disconnects and waits for the adapter's goroutines, or ctx.
func (c *Channel) Stop(ctx context.Context) error {
	stopped, err := c.life.Stop(ctx)
	if !stopped {
		return err
	}
	if err != nil {
		// The goroutines did not end in time: close the session once they do.
		go func() {
			_, _ = c.life.Stop(context.Background())
			c.disconnect()
		}()
		return err
	}
	// With a Holder, giving up the connection stored the cursors already (or tried).
	if err := channels.Await(ctx, func() {
		c.disconnect()
		if c.holder == nil {
			c.flush()
		}
	}); err != nil {
		return fmt.Errorf("discord: stop: %w", err)
	}
	c.log.Info("discord: stopped")
	return nil
}

// disconnect closes the gateway session and the idle REST connections. A normal close
// also tells Discord to end the session; discordgo waits 1 s there.
func (c *Channel) disconnect() {
	_ = c.s.Close()
	c.dialer.closeAll()
	c.client.CloseIdleConnections()
}

// pruneMedia removes downloads older than a day, so the media directory cannot grow forever.
func (c *Channel) pruneMedia() {
	entries, err := os.ReadDir(c.mediaDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && !e.IsDir() && time.Since(info.ModTime()) > mediaMaxAge {
			_ = os.Remove(filepath.Join(c.mediaDir, e.Name()))
		}
	}
}
