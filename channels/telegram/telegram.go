// Package telegram is the Telegram channel adapter, on github.com/go-telegram/bot.
//
// Updates arrive by long polling (a getUpdates loop of our own: per-chat order, retry_after
// honoured, a backoff capped at a few seconds, the offset saved under state_dir only after
// the gateway took the update) or by webhook on the gateway's HTTP listener. Messages with
// media are fetched off the intake, in per-chat lanes backed by an inbox journal (lanes.go);
// an album is one message. Answers stream by editing one message, rendered from Markdown to
// Telegram HTML, split at 4096 UTF-16 units, through one outbound pacer whose per-chat
// holds make every send path wait out a 429's retry_after.
package telegram

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
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

// Channel is the Telegram adapter. It implements channels.Channel and channels.HTTPChannel.
type Channel struct {
	cfg   Config
	opts  Options
	log   *slog.Logger
	scrub scrubber
	api   *bot.Bot

	global *pace.Pacer // whole bot; nil when off
	dms    *pace.Pacer // per private chat: rate and retry_after holds
	groups *pace.Pacer // per group: rate and retry_after holds
	policy pace.Policy

	dedup     *channels.Dedup
	strangers *noticeLimiter
	stripes   [64]sync.Mutex // per-chat order of webhook updates, bounded by hashing

	dir      string // StateDir/telegram
	mediaDir string

	laneMu  sync.Mutex
	lanes   map[int64]*lane // chats with media being fetched; see lanes.go
	notices atomic.Int64    // access notices in flight

	life *channels.Lifecycle // new → running → stopped; owns the goroutines

	mu        sync.Mutex
	sink      channels.Sink
	me        models.User
	connected bool
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
	cfg, opts = cfg.withDefaults(), opts.withDefaults()
	c := &Channel{
		cfg: cfg, opts: opts, log: opts.Logger.With("channel", Name),
		scrub:     newScrubber(cfg.Token.Reveal(), cfg.WebhookSecret.Reveal()),
		life:      channels.NewLifecycle(Name),
		dedup:     channels.NewDedup(4096),
		lanes:     map[int64]*lane{},
		strangers: newNoticeLimiter(1024, time.Hour),
		dir:       filepath.Join(opts.StateDir, Name),
		policy:    pace.Policy{Attempts: 5, Base: 500 * time.Millisecond, Max: 2 * time.Minute},
	}
	c.mediaDir = filepath.Join(c.dir, "media")
	p := opts.Pacing
	if p.GlobalPerSecond > 0 {
		c.global = pace.New(pace.Limits{Global: rate.Limit(p.GlobalPerSecond), GlobalBurst: max(1, int(p.GlobalPerSecond))})
	}
	// The per-chat pacers exist even with no per-chat rate: they keep the holds a 429
	// puts on a chat, which every send path honours.
	perChat := func(every time.Duration) *pace.Pacer {
		var l pace.Limits
		if every > 0 {
			l.PerKey, l.PerKeyBurst = rate.Every(every), 1
		}
		return pace.New(l)
	}
	c.dms, c.groups = perChat(p.PerChatInterval), perChat(p.GroupInterval)
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

// Start checks the token with getMe, prepares polling or the webhook, registers the bot's
// commands and starts receiving. It returns once Telegram answered, or with an error that
// names the problem and never the token.
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
	for _, d := range []string{c.mediaDir, c.inboxDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("telegram: cannot create a state directory: %w", err)
		}
	}
	c.registerCommands(ctx)
	c.life.Go(c.janitor)
	c.replayInbox(life)
	if c.cfg.Mode == ModePolling {
		c.life.Go(c.superviseLongPolling)
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
	err := c.retry(ctx, func(ctx context.Context) (err error) {
		me, err = c.api.GetMe(ctx)
		return err
	})
	if err != nil {
		if errors.Is(err, bot.ErrorUnauthorized) || errors.Is(err, bot.ErrorNotFound) {
			return errors.New("telegram: the bot token was rejected (401 Unauthorized); check channels.telegram.token")
		}
		return fmt.Errorf("telegram: cannot reach the Bot API at %s: %w", c.cfg.APIURL, err)
	}
	c.mu.Lock()
	c.me = *me
	c.mu.Unlock()
	switch {
	case c.cfg.Mode == ModePolling:
		// A webhook left set would make every getUpdates fail with 409.
		err = c.retry(ctx, func(ctx context.Context) error {
			_, err := c.api.DeleteWebhook(ctx, &bot.DeleteWebhookParams{})
			return err
		})
		if err != nil {
			return fmt.Errorf("telegram: deleteWebhook before polling failed: %w", err)
		}
	case c.cfg.WebhookURL != "":
		err = c.retry(ctx, func(ctx context.Context) error {
			_, err := c.api.SetWebhook(ctx, &bot.SetWebhookParams{URL: c.cfg.WebhookURL, SecretToken: c.cfg.WebhookSecret.Reveal(),
				AllowedUpdates: []string{"message"}})
			return err
		})
		if err != nil {
			return fmt.Errorf("telegram: setWebhook to %s failed: %w", c.cfg.WebhookURL, err)
		}
	}
	return nil
}

// Commands are the native commands shown in Telegram's menu; the gateway handles them.
func Commands() []models.BotCommand {
	return []models.BotCommand{
		{Command: "new", Description: "Start a new conversation"},
		{Command: "stop", Description: "Stop the answer in progress"},
		{Command: "status", Description: "Show this chat's session"},
		{Command: "help", Description: "What this bot can do"},
	}
}

func (c *Channel) registerCommands(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	err := c.retry(ctx, func(ctx context.Context) error {
		_, err := c.api.SetMyCommands(ctx, &bot.SetMyCommandsParams{Commands: Commands()})
		return err
	})
	if err != nil {
		// The commands still work when typed; only the menu is missing.
		c.log.Warn("telegram: setMyCommands failed; the command menu may be out of date", "err", err)
	}
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

// retry runs one unpaced Bot API call (start-up, getFile) with the retry policy.
func (c *Channel) retry(ctx context.Context, fn func(ctx context.Context) error) error {
	return pace.Do(ctx, pace.Policy{Attempts: 3, Base: 300 * time.Millisecond, Max: 30 * time.Second}, func(ctx context.Context) error {
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		return c.scrub.classify(ctx, fn(actx))
	})
}

// send runs one message-sending call to chat through the pacer and the retry policy:
// each attempt waits for the chat's and the bot's slot; 429 holds the chat for retry_after
// (for every send path, not only this one); 5xx and network errors back off. The error is
// final and free of the token.
func (c *Channel) send(ctx context.Context, chat int64, timeout time.Duration, fn func(ctx context.Context) error) error {
	return pace.Do(ctx, c.policy, func(ctx context.Context) error {
		if err := c.wait(ctx, chat); err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		err := fn(actx)
		c.noteLimit(chat, err)
		return c.scrub.classify(ctx, err)
	})
}

// noteLimit holds chat for the retry_after of a 429: until it passes, nothing goes there,
// whichever path sends next (a preview, the final text, a split part, a voice note, typing).
func (c *Channel) noteLimit(chat int64, err error) {
	if err == nil {
		return
	}
	secs := 0
	var tmr *bot.TooManyRequestsError
	var ae *apiError
	switch {
	case errors.As(err, &tmr):
		secs = tmr.RetryAfter
	case errors.As(err, &ae) && errors.Is(ae.kind, bot.ErrorTooManyRequests):
		secs = ae.retryAfter
	case errors.Is(err, bot.ErrorTooManyRequests):
	default:
		return
	}
	d := time.Duration(max(secs, 1)) * time.Second
	c.chatPacer(chat).Hold(chatKey(chat), d)
	c.log.Info("telegram: rate limited in a chat; holding its sends", "chat", chat, "retry_after", d)
}

func chatKey(chat int64) string { return strconv.FormatInt(chat, 10) }

// held reports whether a 429 still holds chat.
func (c *Channel) held(chat int64) bool {
	return !c.chatPacer(chat).HeldUntil(chatKey(chat)).IsZero()
}

// wait blocks for a send slot in chat.
func (c *Channel) wait(ctx context.Context, chat int64) error {
	if err := c.chatPacer(chat).Wait(ctx, chatKey(chat)); err != nil {
		return err
	}
	if c.global != nil {
		return c.global.Wait(ctx, "")
	}
	return nil
}

// tryWait takes a send slot only if one is free now: streaming edits skip a beat rather
// than hold up the answer. A chat held by a 429 has no free slot.
//
// The bot's slot is taken before the chat's: a limiter that cannot serve within the
// deadline takes nothing, but one that did stays taken. Taking the chat's slot first and
// then missing the bot's used up the chat's one send a second, so the final answer then
// waited a whole second for the next one.
func (c *Channel) tryWait(ctx context.Context, chat int64) bool {
	if c.held(chat) {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if c.global != nil && c.global.Wait(ctx, "") != nil {
		return false
	}
	return c.chatPacer(chat).Wait(ctx, chatKey(chat)) == nil
}

func (c *Channel) chatPacer(chat int64) *pace.Pacer {
	if chat < 0 {
		return c.groups // group and supergroup ids are negative
	}
	return c.dms
}
