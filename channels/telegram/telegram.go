// Package telegram is the Telegram channel adapter, on github.com/go-telegram/bot.
//
// Updates arrive by long polling (a getUpdates loop of our own: per-chat order, retry_after
// honoured, a backoff capped at a few seconds, the offset saved under state_dir only after
// the gateway took the update) or by webhook on the gateway's HTTP listener. Media are
// delivered as references and downloaded by Fetch, which the gateway calls on the chat's own
// session, so the intake never waits on a download; an album is one message (album.go). Answers stream by editing one message, rendered from Markdown to
// Telegram HTML, split at 4096 UTF-16 units. Every Bot API call goes through a
// channels.Sender, whose per-chat holds make every send path wait out a 429's retry_after.
package telegram

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"
	"golang.org/x/time/rate"

	"gateway/channels"
	"gateway/internal/pace"
)

// Name is the channel's name in config, session keys and logs.
const Name = "telegram"

// MaxText is Telegram's limit for one message, in UTF-16 units after entity parsing.
const MaxText = 4096

// Channel is the Telegram adapter. It implements channels.Channel, channels.HTTPChannel
// and channels.Fetcher.
type Channel struct {
	cfg   Config
	opts  Options
	log   *slog.Logger
	scrub scrubber
	api   *bot.Bot

	// Every Bot API call goes through a channels.Sender. Sends to a chat are paced per
	// chat, private chats and groups apart (their pacers keep the holds a 429 puts on a
	// chat), and share the bot's slot; see to.
	dms, groups channels.Sender
	calls       channels.Sender // start-up calls and getFile: not to a chat, fewer attempts
	downloads   channels.Sender // file downloads: plain HTTP, classified by fetch itself

	dedup     *channels.Dedup
	strangers *channels.NoticeLimiter
	stripes   [64]sync.Mutex // per-chat order of webhook updates, bounded by hashing

	dir      string // StateDir/telegram
	mediaDir string

	albumMu sync.Mutex
	albums  map[int64]*album // albums being gathered, by chat; see album.go
	notices channels.Notices // access notices in flight

	life *channels.Lifecycle // new → running → stopped; owns the goroutines

	mu        sync.Mutex
	sink      channels.Sink
	me        models.User
	connected bool
	// offered are the names of the commands in the bot's menus: in a group, "/stop"
	// without @bot is one of ours when we offer it (Telegram sends a privacy-mode bot such
	// a command only when it was the last bot to speak), someone else's otherwise.
	offered map[string]bool

	held *channels.HeldWhere // with a Holder: polling, held by one process at a time
}

// New checks cfg and opts and returns an adapter that is not yet connected.
func New(cfg Config, opts Options) (*Channel, error) {
	cfg.Enabled = true
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("telegram: %w", err)
	}
	if opts.StateDir == "" {
		return nil, errors.New("telegram: a state directory is required (state_dir) to keep the update offset and downloaded media")
	}
	cfg, opts = cfg.WithDefaults(), opts.withDefaults()
	c := &Channel{
		cfg: cfg, opts: opts, log: opts.Logger.With("channel", Name),
		scrub:     newScrubber(cfg.Token.Reveal(), cfg.WebhookSecret.Reveal()),
		life:      channels.NewLifecycle(Name),
		dedup:     channels.NewDedup(4096),
		albums:    map[int64]*album{},
		strangers: channels.Strangers(opts.State, Name),
		dir:       filepath.Join(opts.StateDir, Name),
	}
	c.held = &channels.HeldWhere{Holder: opts.Holder, Log: c.log, Here: "telegram: polling here",
		Elsewhere: "telegram: polling held elsewhere; this process still sends"}
	c.mediaDir = filepath.Join(c.dir, "media")
	c.newSenders()
	api, err := bot.New(cfg.Token.Reveal(),
		bot.WithSkipGetMe(),
		bot.WithServerURL(cfg.APIURL),
		bot.WithHTTPClient(opts.PollTimeout, opts.HTTPClient),
		bot.WithErrorsHandler(func(err error) { c.log.Warn("telegram client", "err", c.scrub.wrap(err)) }),
		bot.WithDebugHandler(func(string, ...any) {}),
	)
	if err != nil {
		return nil, fmt.Errorf("telegram: %w", c.scrub.wrap(err))
	}
	c.api = api
	return c, nil
}

// Name returns "telegram".
func (c *Channel) Name() string { return Name }

// Start checks the token with getMe, prepares polling or the webhook and starts receiving.
// The command menu is the gateway's to set (SetCommands). It returns once Telegram
// answered, or with an error that names the problem and never the token.
func (c *Channel) Start(ctx context.Context, sink channels.Sink) error {
	life, err := c.life.Begin()
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.sink = sink
	c.mu.Unlock()
	// Start is work Stop waits for: a Stop meanwhile cancels life, which ends the start-up
	// calls, and returns only once Start did, so that no goroutine or "connected" follows it.
	if _, ok := c.life.Enter(); !ok {
		c.life.Fail()
		return fmt.Errorf("telegram: stopped while starting: %w", channels.ErrStopped)
	}
	err = c.start(ctx, life)
	c.life.Leave()
	if err != nil {
		c.life.Fail()
		c.opts.HTTPClient.CloseIdleConnections()
		return err
	}
	return nil
}

// start is Start once running: life is the run context.
func (c *Channel) start(ctx context.Context, life context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(life, cancel)()
	if err := c.connect(ctx); err != nil {
		if life.Err() != nil {
			return fmt.Errorf("telegram: stopped while starting: %w", channels.ErrStopped)
		}
		return err
	}
	if err := os.MkdirAll(c.mediaDir, 0o700); err != nil {
		return channels.Permanent(fmt.Errorf("telegram: cannot create a state directory: %w", err))
	}
	c.life.Go(c.janitor)
	// An old inbox is handed over off Start: the gateway takes this channel's messages only
	// once Start has returned, so handing them over here would wait forever. Polling
	// follows it, so its messages still come before new ones.
	if c.cfg.Mode == ModePolling {
		c.life.Go(func(ctx context.Context) { c.migrateInbox(ctx); c.pollWhileHeld(ctx) })
	} else {
		c.life.Go(c.migrateInbox)
	}
	if life.Err() != nil {
		return fmt.Errorf("telegram: stopped while starting: %w", channels.ErrStopped)
	}
	c.setConnected(true, nil)
	c.log.Info("telegram connected", "bot", "@"+c.bot().Username, "mode", c.cfg.Mode)
	return nil
}

// connect runs the start-up calls: getMe, then deleteWebhook or setWebhook.
func (c *Channel) connect(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var me *models.User
	err := c.calls.Do(ctx, "", func(ctx context.Context) (err error) {
		me, err = c.api.GetMe(ctx)
		return err
	})
	if err != nil {
		if errors.Is(err, bot.ErrorUnauthorized) || errors.Is(err, bot.ErrorNotFound) {
			return channels.Permanent(errors.New("telegram: the bot token was rejected (401 Unauthorized); check channels.telegram.token"))
		}
		return refused(fmt.Errorf("telegram: cannot reach the Bot API at %s: %w", c.cfg.APIURL, err))
	}
	c.mu.Lock()
	c.me = *me
	c.mu.Unlock()
	switch {
	case c.cfg.Mode == ModePolling:
		// A webhook left set would make every getUpdates fail with 409.
		err = c.calls.Do(ctx, "", func(ctx context.Context) error {
			_, err := c.api.DeleteWebhook(ctx, &bot.DeleteWebhookParams{})
			return err
		})
		if errors.Is(err, bot.ErrorNotFound) {
			// getMe took the token, so the server has no such method (a Bot API stand-in
			// that implements only what a bot needs): no webhook can be set there either.
			c.log.Warn("telegram: the Bot API has no deleteWebhook; polling without it", "api_url", c.cfg.APIURL)
			err = nil
		}
		if err != nil {
			return refused(fmt.Errorf("telegram: deleteWebhook before polling failed: %w", err))
		}
	case c.cfg.WebhookURL != "":
		err = c.calls.Do(ctx, "", func(ctx context.Context) error {
			_, err := c.api.SetWebhook(ctx, &bot.SetWebhookParams{URL: c.cfg.WebhookURL, SecretToken: c.cfg.WebhookSecret.Reveal(),
				AllowedUpdates: []string{"message"}})
			return err
		})
		if err != nil {
			return refused(fmt.Errorf("telegram: setWebhook to %s failed: %w", c.cfg.WebhookURL, err))
		}
	}
	return nil
}

// refused marks a start-up call's failure permanent when the Bot API refused the call (a
// 4xx other than 429: a bad token, a webhook URL it will not take), which no retry fixes;
// a network failure, a timeout, a 5xx or a 429 may pass, and the gateway tries again.
func refused(err error) error {
	for _, k := range []error{bot.ErrorBadRequest, bot.ErrorForbidden, bot.ErrorUnauthorized, bot.ErrorNotFound, bot.ErrorConflict} {
		if errors.Is(err, k) {
			return channels.Permanent(err)
		}
	}
	return err
}

// SetCommands replaces the command menu with cmds (the gateway's registry: builtins and
// hooks' commands). It is the only call that sets the menu: the gateway makes it once the
// channel started (and on a reload that changed the list), so Start sets none of its own,
// which would cost a second setMyCommands on every start and show, until the gateway's
// call, a menu without the hooks' commands.
func (c *Channel) SetCommands(ctx context.Context, cmds []channels.Command) error {
	return c.setCommands(ctx, nil, cmds)
}

// SetChatCommands gives one chat its own menu (scope chat).
func (c *Channel) SetChatCommands(ctx context.Context, chatID string, cmds []channels.Command) error {
	return c.setCommands(ctx, &models.BotCommandScopeChat{ChatID: chatID}, cmds)
}

func (c *Channel) setCommands(ctx context.Context, scope models.BotCommandScope, cmds []channels.Command) error {
	list := make([]models.BotCommand, 0, len(cmds))
	c.mu.Lock()
	if c.offered == nil || scope == nil {
		// The common menu comes first in every push of the menus, the chats' own after
		// it: a command a reload removed stops being one of ours.
		c.offered = map[string]bool{}
	}
	for _, cmd := range cmds {
		list = append(list, models.BotCommand{Command: cmd.Name, Description: cmd.Summary(256)}) // Telegram's limit
		// Bounded: only the gateway's own commands are ever offered.
		c.offered[strings.ToLower(cmd.Name)] = true
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return c.calls.Do(ctx, "", func(ctx context.Context) error {
		_, err := c.api.SetMyCommands(ctx, &bot.SetMyCommandsParams{Commands: list, Scope: scope})
		return err
	})
}

// Stop ends polling, the webhook handler and every goroutine the adapter started.
func (c *Channel) Stop(ctx context.Context) error {
	stopped, err := c.life.Stop(ctx)
	if err != nil {
		return err
	}
	// Kept-alive connections to the Bot API would keep two goroutines each after Stop.
	c.opts.HTTPClient.CloseIdleConnections()
	if stopped {
		c.setConnected(false, nil)
	}
	return nil
}

func (c *Channel) setConnected(up bool, err error) {
	c.mu.Lock()
	changed := c.connected != up
	c.connected = up
	sink := c.sink
	c.mu.Unlock()
	if changed && sink != nil {
		sink.Connected(Name, up, err)
	}
}

func (c *Channel) bot() models.User {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.me
}

// globalBurst is how many sends the bot may make at once above its rate (a rate below it,
// set for tests, is its own burst).
const globalBurst = 5

// newSenders makes the Senders every Bot API call goes through.
func (c *Channel) newSenders() {
	p := c.opts.Pacing
	var global *pace.Pacer
	if p.GlobalPerSecond > 0 {
		// A small burst: a second's worth on top of the rate let the first second of many
		// answers due at once carry nearly twice Telegram's 30, which it answers with 429s;
		// none at all would make answers that happen to come close together wait their
		// 33 ms turn.
		global = pace.New(pace.Limits{Global: rate.Limit(p.GlobalPerSecond), GlobalBurst: min(globalBurst, max(1, int(p.GlobalPerSecond)))})
	}
	// A 429 holds the chat for its retry_after: until it passes nothing goes there,
	// whichever path sends next (a preview, the final text, a split part, a voice note,
	// typing). The per-chat pacers exist even with no per-chat rate, to keep those holds.
	send := func(every time.Duration) channels.Sender {
		var l pace.Limits
		if every > 0 {
			l.PerKey, l.PerKeyBurst = rate.Every(every), 1
		}
		return channels.Sender{
			Pacer:    pace.New(l),
			Global:   global,
			Shared:   c.opts.Budget,
			Policy:   pace.Policy{Attempts: 5, Base: 500 * time.Millisecond, Max: 2 * time.Minute},
			Timeout:  30 * time.Second,
			Classify: c.scrub.classify,
			Scrub:    c.scrub.Scrubber,
			OnHold: func(chat string, d time.Duration) {
				c.log.Info("telegram: rate limited in a chat; holding its sends", "chat", chat, "retry_after", d)
			},
		}
	}
	c.dms, c.groups = send(p.PerChatInterval), send(p.GroupInterval)
	c.calls = channels.Sender{
		Policy:  pace.Policy{Attempts: 3, Base: 300 * time.Millisecond, Max: 30 * time.Second},
		Timeout: 20 * time.Second, Classify: c.scrub.classify, Scrub: c.scrub.Scrubber,
	}
	c.downloads = channels.Sender{Policy: pace.Policy{Attempts: 3}, Timeout: 5 * time.Minute, Scrub: c.scrub.Scrubber}
}

// to is the Sender for chat, with timeout for each attempt, and the chat's key. A copy of
// a Sender shares its pacers: the chat's slot, the bot's and the chat's hold.
func (c *Channel) to(chat int64, timeout time.Duration) (*channels.Sender, string) {
	s := c.dms
	if chat < 0 {
		s = c.groups // group and supergroup ids are negative
	}
	s.Timeout = timeout
	return &s, strconv.FormatInt(chat, 10)
}
