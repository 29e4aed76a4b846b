// Package slack is the Slack channel adapter, on slack-go. It receives events by Socket
// Mode (default) or the Events API over the gateway's HTTP listener, and answers in the
// thread of the message it answers, streaming by chat.update.
package slack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	slackgo "github.com/slack-go/slack"

	"gateway/channels"
	"gateway/internal/pace"
)

// Name is the adapter's channel name.
const Name = "slack"

// MaxTextLen is the length, in characters, at which a message is split.
const MaxTextLen = 4000

const (
	callTimeout     = 30 * time.Second // one Web API call
	transferTimeout = 2 * time.Minute  // one file download or upload
	deliverTimeout  = 30 * time.Second // Sink.Deliver
	editInterval    = time.Second      // least time between two edits of a streaming answer
	dedupSize       = 10_000
	threadSetSize   = 10_000
)

var (
	_ channels.Channel     = (*Channel)(nil)
	_ channels.HTTPChannel = (*Channel)(nil)
)

// Channel is the Slack adapter. It is safe for concurrent use.
type Channel struct {
	cfg Config
	log *slog.Logger
	dir string
	api *slackgo.Client
	// Every Web API call that puts something in a chat, and auth.test, goes through one of
	// these. They share one Pacer: a rate limit on any call to a chat holds every later
	// one to it, whichever Sender makes it.
	send     channels.Sender // what the user must see: messages, final edits, deletions
	optional channels.Sender // what may skip a turn: streaming edits, typing, statuses (one attempt)
	transfer channels.Sender // file uploads (paced) and downloads (key "")
	startup  channels.Sender // auth.test at Start (key "")
	claims   *claims
	threads  *threadSet  // channel:thread_ts the bot answered in: replies there need no mention
	noStatus *boundedSet // channels where assistant.threads.setStatus was refused
	// strangers are the users told lately that they are not on allow_from.
	strangers *channels.NoticeLimiter
	notices   channels.Notices // not-allowed notices being sent, off the event loop
	names     *names           // authors' display names
	// lastThread is, by channel:user, the thread of the user's latest conversation with
	// the bot in a channel: a slash command there (never typed in a thread) acts on it.
	lastThread *boundedMap[string]
	// commands are the slash commands delivered lately, by message id: their replies go
	// to the user alone.
	commands *boundedMap[slashInfo]
	life     *channels.Lifecycle
	scrub    channels.Scrubber

	mu      sync.Mutex
	sink    channels.Sink // set once auth.test passed: the adapter takes messages from then on
	botUser string
	mention *regexp.Regexp // <@botUser> and <@botUser|name> in message text
	up      bool
	pruned  time.Time
	connErr error // the last Socket Mode connection failure, for Start's error
}

// errStopping is Start's error when Stop came before the adapter was up.
var errStopping = errors.New("slack: stopped while starting")

// New returns an adapter for cfg, not yet started.
func New(cfg Config, opts Options) (*Channel, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("channel", Name)
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 60 * time.Second}
	}
	dir := opts.StateDir
	if dir == "" {
		dir = os.TempDir()
	}
	c := &Channel{
		cfg:      cfg,
		log:      log,
		dir:      filepath.Join(dir, "slack", "files"),
		claims:   newClaims(dedupSize),
		threads:  &threadSet{mem: newBoundedSet(threadSetSize), st: opts.State, log: log},
		noStatus: newBoundedSet(1000),
		// A stranger writing again is not told again for an hour: every DM would answer.
		strangers: channels.Strangers(opts.State, Name),

		lastThread: newBoundedMap[string](threadSetSize),
		commands:   newBoundedMap[slashInfo](1000),
		life:       channels.NewLifecycle(Name),
		scrub:      channels.NewScrubber(cfg.BotToken.Reveal(), cfg.AppToken.Reveal(), cfg.SigningSecret.Reveal()),
	}
	pacer := pace.New(pace.Limits{Global: 10, GlobalBurst: 20, PerKey: 1, PerKeyBurst: 3})
	sender := func(pol pace.Policy, timeout time.Duration) channels.Sender {
		return channels.Sender{Pacer: pacer, Policy: pol, Timeout: timeout, Classify: classify, Scrub: c.scrub,
			OnHold: func(chat string, d time.Duration) {
				log.Warn("slack: rate limited; holding sends to the chat", "chat", chat, "wait", d)
			}}
	}
	sendPolicy := pace.Policy{Attempts: 4, Base: 500 * time.Millisecond, Max: 60 * time.Second}
	c.send = sender(sendPolicy, callTimeout)
	c.optional = sender(pace.Policy{Attempts: 1}, callTimeout)
	c.transfer = sender(sendPolicy, transferTimeout)
	c.startup = sender(pace.Policy{Attempts: 3, Base: 500 * time.Millisecond, Max: 30 * time.Second}, callTimeout)
	c.api = slackgo.New(cfg.BotToken.Reveal(),
		slackgo.OptionHTTPClient(hc),
		slackgo.OptionAPIURL(cfg.APIURL),
		slackgo.OptionAppLevelToken(cfg.AppToken.Reveal()),
		slackgo.OptionLog(libLog{c}),
	)
	// users.info is a read, not a send: it goes through no Sender (no pacing, no retry),
	// and a rate limit on it pauses the lookups instead (see names).
	c.names = newNames(func(ctx context.Context, id string) (*slackgo.User, error) {
		return c.api.GetUserInfoContext(ctx, id, slackgo.GetUserInfoOptionIncludeLocale(false))
	}, log, c.scrub)
	if cfg.DMPolicy != channels.DMOpen && len(cfg.AllowFrom) == 0 {
		log.Warn("channels.slack.allow_from is empty: nobody may talk to the bot; add Slack user ids or set dm_policy: open")
	}
	return c, nil
}

// Name is "slack".
func (c *Channel) Name() string { return Name }

// Start checks the bot token with auth.test and, in socket mode, returns once the Socket
// Mode connection is open. In events mode the adapter then takes requests on EventsPath.
// A Stop while Start runs makes Start return at once with an error.
func (c *Channel) Start(ctx context.Context, sink channels.Sink) error {
	runCtx, err := c.life.Begin()
	if err != nil {
		return err
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(runCtx, cancel)()
	user, err := c.authTest(actx)
	if err != nil {
		stopped := runCtx.Err() != nil
		c.life.Fail()
		if stopped {
			return errStopping
		}
		return err
	}
	c.mu.Lock()
	c.sink, c.botUser = sink, user
	c.mention = regexp.MustCompile(`<@` + regexp.QuoteMeta(user) + `(\|[^>]*)?>`)
	c.mu.Unlock()
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		c.life.Fail()
		return fmt.Errorf("slack: cannot create the download directory: %w", err)
	}
	c.prune()

	if c.cfg.mode() == ModeEvents {
		// Reported inside Enter/Leave, so that a concurrent Stop reports down after it.
		if _, ok := c.life.Enter(); !ok {
			return errStopping
		}
		c.setUp(true, nil)
		c.life.Leave()
		c.log.Info("slack: ready for Events API requests", "path", EventsPath, "bot_user", user)
		return nil
	}
	ready := make(chan error, 1)
	if !c.life.Go(func(ctx context.Context) { c.runSocket(ctx, ready) }) {
		return errStopping
	}
	select {
	case err := <-ready:
		if err != nil {
			c.life.Fail()
			return err
		}
		return nil
	case <-runCtx.Done():
		c.life.Fail() // waits for the socket goroutine
		return errStopping
	case <-ctx.Done():
		c.life.Fail()
		c.mu.Lock()
		last := c.connErr
		c.mu.Unlock()
		if last != nil {
			return fmt.Errorf("slack: Socket Mode did not connect in time (last error: %v): %w", last, ctx.Err())
		}
		return fmt.Errorf("slack: Socket Mode did not connect in time: %w", ctx.Err())
	}
}

// authTest returns the bot's user id, or an error that says which setting to fix.
func (c *Channel) authTest(ctx context.Context) (string, error) {
	var res *slackgo.AuthTestResponse
	var last error // of the last attempt: the error Do returns is scrubbed
	err := c.startup.Do(ctx, "", func(ctx context.Context) error {
		res, last = c.api.AuthTestContext(ctx)
		return last
	})
	if code := slackError(last); err != nil && code != "" {
		switch code {
		case "invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired":
			return "", channels.Permanent(fmt.Errorf("slack: the bot token was rejected (%s); check channels.slack.bot_token", code))
		}
		return "", refusal(last, fmt.Errorf("slack: auth.test failed: %s", code))
	}
	if err != nil {
		return "", refusal(last, fmt.Errorf("slack: cannot reach the Slack API at %s: %w", c.cfg.APIURL, err))
	}
	return res.UserID, nil
}

// refusal is err, the error Start returns for cause, marked permanent when Slack refused the
// call for a reason no retry fixes (an error code other than a rate limit or an outage, a
// 4xx answer): a network failure, a timeout, a 5xx or a 429 may pass, and the gateway tries
// the start again.
func refusal(cause, err error) error {
	if retry, _ := retryable(cause); retry || cause == nil || errors.Is(cause, context.Canceled) {
		return err
	}
	if slackError(cause) != "" {
		return channels.Permanent(err)
	}
	if sc, ok := errors.AsType[slackgo.StatusCodeError](cause); ok && sc.Code < 500 {
		return channels.Permanent(err)
	}
	return err
}

// Stop disconnects and waits for the adapter's goroutines and Events API requests, or ctx.
func (c *Channel) Stop(ctx context.Context) error {
	stopped, err := c.life.Stop(ctx)
	if err != nil {
		return err
	}
	if stopped {
		c.setUp(false, nil)
	}
	return nil
}

// running returns the sink and the run context while the adapter is started.
func (c *Channel) running() (channels.Sink, context.Context, bool) {
	if !c.life.Running() {
		return nil, nil, false
	}
	c.mu.Lock()
	sink := c.sink
	c.mu.Unlock()
	if sink == nil { // auth.test has not passed yet
		return nil, nil, false
	}
	return sink, c.life.Context(), true
}

// bot is the bot's user id and the pattern of a mention of it.
func (c *Channel) bot() (string, *regexp.Regexp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.botUser, c.mention
}

// setUp reports a connection change to the sink once per change.
func (c *Channel) setUp(up bool, err error) {
	c.mu.Lock()
	changed := c.up != up
	c.up = up
	sink := c.sink
	c.mu.Unlock()
	if changed && sink != nil {
		sink.Connected(Name, up, err)
	}
}

// libLog routes slack-go's own log lines to the adapter's logger at debug level.
type libLog struct{ c *Channel }

func (l libLog) Output(_ int, s string) error {
	l.c.log.Debug("slack-go: " + l.c.scrub.String(strings.TrimSpace(s)))
	return nil
}

// prune removes downloaded files older than a day, at most once an hour, so that the
// download directory cannot grow without bound.
func (c *Channel) prune() {
	c.mu.Lock()
	if time.Since(c.pruned) < time.Hour {
		c.mu.Unlock()
		return
	}
	c.pruned = time.Now()
	c.mu.Unlock()
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && !e.IsDir() && time.Since(info.ModTime()) > 24*time.Hour {
			os.Remove(filepath.Join(c.dir, e.Name()))
		}
	}
}
