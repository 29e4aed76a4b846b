package web

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"gateway/channels"
	"gateway/internal/secret"
)

// Name is the channel's name in messages, targets and session keys.
const Name = "web"

// DefaultMaxUploadBytes bounds one voice note (the same default as stt.max_bytes).
const DefaultMaxUploadBytes = 20_000_000

const (
	maxSockets      = 32               // open sockets in all; each may buffer one upload
	maxSocketsChat  = 8                // tabs open on one chat
	maxLiveChat     = 8                // answers in progress remembered per chat
	liveIdle        = 10 * time.Minute // an answer in progress silent this long is not shown to new tabs
	maxTextBytes    = 64 << 10         // one typed message
	maxIDLen        = 128              // chat, message and user ids
	dedupSize       = 1024             // recent message ids remembered
	deliverTimeout  = 30 * time.Second // the gateway queues quickly or says no
	writeTimeout    = 10 * time.Second // a tab that cannot take a frame in this time is closed
	pingInterval    = 30 * time.Second
	pingTimeout     = 15 * time.Second
	readLimitMargin = 64 << 10 // JSON around the base64 audio
)

// Config is the web channel's configuration (channels.web).
type Config struct {
	Enabled        bool  `mapstructure:"enabled"`
	MaxUploadBytes int64 `mapstructure:"max_upload_bytes"` // one upload; 0: DefaultMaxUploadBytes
	// AllowedHosts are host names (without port) the chat answers to besides IP literals and
	// localhost, e.g. a LAN name. Other names are refused to defeat DNS rebinding.
	AllowedHosts []string `mapstructure:"allowed_hosts"`
	// Token is the web chat's own password; required when http.listen is not loopback. The page
	// asks for it once and keeps it.
	Token secret.Secret `mapstructure:"token"`
}

// WithDefaults is cfg as the channel runs it: each key that is not set takes its default.
func (c Config) WithDefaults() Config {
	if c.MaxUploadBytes <= 0 {
		c.MaxUploadBytes = DefaultMaxUploadBytes
	}
	return c
}

// Options are the channel's collaborators.
type Options struct {
	Logger   *slog.Logger
	MediaDir string // where uploaded audio is written; a private temp dir when empty
}

//go:embed page.html
var page []byte

// Channel is the web chat. Create it with New, register Routes, then Start.
type Channel struct {
	cfg       Config
	log       *slog.Logger
	readLimit int64
	dedup     *channels.Dedup
	media     *mediaStore
	history   *histories
	pageCSP   string
	life      *channels.Lifecycle // socket handlers and their pingers run under it
	scrub     channels.Scrubber   // the token, from every error logged or returned

	mu       sync.Mutex
	sink     channels.Sink
	mediaDir string
	tempDir  bool // mediaDir was created by Start and is removed by Stop
	all      map[*conn]struct{}
	byChat   map[string]map[*conn]struct{}
	// live are the answers in progress per chat, oldest first, so that a tab opened (or
	// reloaded, or reconnected) while one streams shows it from its beginning.
	live map[string][]*stream
}

var (
	_ channels.Channel     = (*Channel)(nil)
	_ channels.HTTPChannel = (*Channel)(nil)
)

// New returns a web channel; nothing is served until Routes is mounted and Start is called.
func New(cfg Config, opts Options) *Channel {
	cfg = cfg.WithDefaults()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Channel{
		cfg:       cfg,
		log:       log.With("channel", Name),
		readLimit: cfg.MaxUploadBytes*4/3 + readLimitMargin,
		dedup:     channels.NewDedup(dedupSize),
		media:     newMediaStore(),
		history:   newHistories(),
		pageCSP:   pageCSP(page),
		life:      channels.NewLifecycle(Name),
		scrub:     newScrubber(cfg.Token.Reveal()),
		mediaDir:  opts.MediaDir,
		all:       map[*conn]struct{}{},
		byChat:    map[string]map[*conn]struct{}{},
		live:      map[string][]*stream{},
	}
}

// Name returns "web".
func (c *Channel) Name() string { return Name }

// Pinned reports true: a chat is a WebSocket to this process, so only this process answers it.
func (c *Channel) Pinned() bool { return true }

// Routes registers the page, the WebSocket and the media route.
func (c *Channel) Routes(mux *http.ServeMux) {
	mux.Handle("GET /{$}", c.hostGuard(http.HandlerFunc(c.servePage)))
	mux.Handle("GET /ws", c.hostGuard(http.HandlerFunc(c.serveWS)))
	mux.Handle("GET /media/{id}", c.hostGuard(http.HandlerFunc(c.serveMedia)))
}

// Start makes the chat available. The web chat is connected as soon as it runs: the
// browser connects to us, not the other way round.
func (c *Channel) Start(ctx context.Context, sink channels.Sink) error {
	if sink == nil {
		return channels.Permanent(errors.New("web: start: nil sink"))
	}
	// Sockets are let in under c.mu (serveWS), so none is served before the sink is set.
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.life.Begin(); err != nil {
		return err
	}
	if err := c.makeMediaDir(); err != nil {
		c.life.Fail()
		// A folder the gateway cannot create is the admin's to fix (media_dir, permissions).
		return channels.Permanent(c.scrub.Wrap(fmt.Errorf("web: start: %w", err)))
	}
	c.sink = sink
	sink.Connected(Name, true, nil)
	return nil
}

// makeMediaDir creates the directory uploads are written to: the one configured, or a
// private temporary one that Stop removes.
func (c *Channel) makeMediaDir() error {
	if c.mediaDir == "" {
		dir, err := os.MkdirTemp("", "gateway-web-*")
		if err != nil {
			return fmt.Errorf("create a media directory: %w", err)
		}
		c.mediaDir, c.tempDir = dir, true
		return nil
	}
	if err := os.MkdirAll(c.mediaDir, 0o700); err != nil {
		return fmt.Errorf("create media directory %s: %w", c.mediaDir, err)
	}
	return nil
}

// Stop closes every socket and returns once their goroutines have ended, or ctx is done.
func (c *Channel) Stop(ctx context.Context) error {
	// Close with a status while the run context still lives, so the page knows the server
	// went away (it reconnects with backoff); cancelling it first would cut the sockets.
	c.mu.Lock()
	conns := make([]*conn, 0, len(c.all))
	for k := range c.all {
		conns = append(conns, k)
	}
	c.mu.Unlock()
	var closing sync.WaitGroup
	for _, k := range conns {
		closing.Go(func() { _ = k.ws.Close(websocket.StatusGoingAway, "gateway stopping") })
	}
	closing.Wait()

	// Cancelling the run context ends Deliver calls in flight and sockets accepted meanwhile.
	stopped, err := c.life.Stop(ctx)
	if !stopped {
		return err
	}
	c.media.clear()
	c.mu.Lock()
	clear(c.live)
	c.mu.Unlock()
	// Start holds c.mu from Begin until it has reported the connection, so the disconnect is
	// reported after it; a Start that failed set no sink and reported nothing.
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tempDir {
		_ = os.RemoveAll(c.mediaDir)
	}
	if c.sink != nil {
		c.sink.Connected(Name, false, nil)
	}
	return err
}

// Open returns a stream that writes frames to every socket open on target's chat. A chat
// with no open socket is not an error: the browser went away, and the page shows the
// conversation again when the user comes back only as far as it had seen it.
func (c *Channel) Open(ctx context.Context, target channels.Target) (channels.Stream, error) {
	if !c.life.Running() {
		return nil, errors.New("web: open: the channel is not running")
	}
	if err := c.CheckTarget(target); err != nil {
		return nil, err
	}
	return &stream{c: c, chatID: target.ChatID, replyTo: target.ReplyToID, gen: c.history.generation(target.ChatID)}, nil
}

// CheckTarget refuses a chat id no page can open (channels.TargetChecker): an admin's
// `gateway send` to it would be "sent" to no one.
func (c *Channel) CheckTarget(target channels.Target) error {
	if !validID(target.ChatID) {
		return channels.BadTarget(fmt.Errorf("web: %q is not a web chat id (1-%d characters of A-Z, a-z, 0-9, _ . : -)", trunc(target.ChatID, 64), maxIDLen))
	}
	return nil
}

// stream is one answer. It gathers what the page will show of it (streamed text, parts) so
// that the finished answer joins the chat's transcript.
type stream struct {
	c       *Channel
	chatID  string
	replyTo string
	gen     uint64    // the conversation the answer belongs to (see histories.clear)
	last    time.Time // its latest frame, under Channel.mu (see trackLocked)

	mu    sync.Mutex
	text  strings.Builder // deltas so far, bounded by historyEntryMax
	parts []wirePart
}

// Send writes f to the chat's sockets; it returns when every socket has taken it.
func (s *stream) Send(ctx context.Context, f channels.Frame) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	wf := wireFrame{Type: string(f.Type), Text: f.Text, Tool: f.Tool, ReplyTo: s.replyTo}
	for _, p := range f.Parts {
		wp, err := s.c.publish(p)
		if err != nil {
			// Deliver the rest of the answer; the user sees a note instead of this part.
			s.c.log.Warn("part not delivered", "chat", s.chatID, "type", p.Type, "err", s.c.scrub.Wrap(err))
			wp = wirePart{Type: string(channels.PartText), Text: "(an attachment could not be delivered)"}
		}
		wf.Parts = append(wf.Parts, wp)
	}
	// What a tab opening now is shown (history, answers in progress) and which tabs get
	// this frame are decided together, so that a new tab sees each piece exactly once.
	s.c.mu.Lock()
	s.remember(f.Type, f.Text, wf.Parts)
	s.c.trackLocked(s, f.Type)
	targets := s.c.socketsLocked(s.chatID, nil)
	s.c.mu.Unlock()
	s.c.writeAll(ctx, s.chatID, targets, wf)
	return ctx.Err()
}

// trackLocked keeps s among its chat's answers in progress until its done or error.
func (c *Channel) trackLocked(s *stream, t channels.FrameType) {
	s.last = time.Now()
	live := c.live[s.chatID]
	i := slices.Index(live, s)
	switch {
	case t == channels.FrameDone || t == channels.FrameError:
		if i >= 0 {
			live = slices.Delete(live, i, i+1)
		}
	case i < 0:
		// An answer the gateway abandoned never ends; the oldest make room.
		if len(live) >= maxLiveChat {
			live = slices.Delete(live, 0, 1)
		}
		live = append(live, s)
	}
	if len(live) == 0 {
		delete(c.live, s.chatID)
		return
	}
	c.live[s.chatID] = live
}

// inProgressLocked returns chat's answers in progress in the conversation of now (not one
// that /new ended) as history entries with what they said so far.
func (c *Channel) inProgressLocked(chat string) []historyEntry {
	gen := c.history.generation(chat)
	var out []historyEntry
	for _, s := range c.live[chat] {
		// One silent this long was abandoned (the gateway stopped it without an end):
		// shown, it would stream forever in every tab opened later.
		if s.gen == gen && time.Since(s.last) < liveIdle {
			out = append(out, s.soFar())
		}
	}
	return out
}

// remember keeps the answer for the transcript; done or error ends it there.
func (s *stream) remember(t channels.FrameType, text string, parts []wirePart) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch t {
	case channels.FrameStart:
		// Begun again (after a restart): the page starts the bubble over, and so does this.
		s.text.Reset()
		s.parts = nil
	case channels.FrameDelta:
		if s.text.Len() < historyEntryMax {
			s.text.WriteString(text)
		}
	case channels.FrameParts:
		s.parts = append(s.parts, parts[:min(len(parts), 16-len(s.parts))]...)
	case channels.FrameDone, channels.FrameError:
		e := historyEntry{Role: "assistant", ReplyTo: s.replyTo, Text: text, Parts: s.parts, Error: t == channels.FrameError}
		if e.Text == "" && !e.Error {
			e.Text = s.text.String() // done carries the whole text, except after a stop
		}
		s.text.Reset()
		s.parts = nil
		if e.Text != "" || len(e.Parts) > 0 {
			s.c.history.addAnswer(s.chatID, s.gen, e)
		}
	}
}

// soFar is the answer as written so far, for a tab that opens while it streams.
func (s *stream) soFar() historyEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return historyEntry{Role: "assistant", ReplyTo: s.replyTo, Text: s.text.String(), Parts: slices.Clone(s.parts), Streaming: true}
}

// broadcastExcept writes one frame to every socket of chat but skip.
func (c *Channel) broadcastExcept(ctx context.Context, chat string, skip *conn, f wireFrame) {
	c.mu.Lock()
	targets := c.socketsLocked(chat, skip)
	c.mu.Unlock()
	c.writeAll(ctx, chat, targets, f)
}

// socketsLocked returns chat's sockets but skip.
func (c *Channel) socketsLocked(chat string, skip *conn) []*conn {
	targets := make([]*conn, 0, len(c.byChat[chat]))
	for k := range c.byChat[chat] {
		if k != skip {
			targets = append(targets, k)
		}
	}
	return targets
}

// writeAll writes f to targets. A socket that fails is closed (the page reconnects); that
// is not the answer's failure.
func (c *Channel) writeAll(ctx context.Context, chat string, targets []*conn, f wireFrame) {
	for _, k := range targets {
		if err := k.send(ctx, f); err != nil && ctx.Err() == nil {
			c.log.Debug("frame not written; closing the socket", "chat", chat, "frame", f.Type, "err", c.scrub.Wrap(err))
			_ = k.ws.CloseNow()
		}
	}
}

// hostGuard refuses requests whose Host could be a rebinding attacker's name.
func (c *Channel) hostGuard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hostAllowed(r.Host, c.cfg.AllowedHosts) {
			c.log.Warn("request refused: host not allowed", "host", r.Host, "path", r.URL.Path)
			http.Error(w, fmt.Sprintf("The web chat does not answer to host %q. Open it via 127.0.0.1 or localhost, or add the name to channels.web.allowed_hosts.", hostOnly(r.Host)), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (c *Channel) servePage(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", c.pageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	_, _ = w.Write(page)
}

// pageCSP allows exactly the page's own inline script (by hash), so that even a mistake in
// the markdown renderer could not run injected script.
func pageCSP(html []byte) string {
	s := string(html)
	var hashes []string
	for {
		i := strings.Index(s, "<script>")
		if i < 0 {
			break
		}
		s = s[i+len("<script>"):]
		j := strings.Index(s, "</script>")
		if j < 0 {
			break
		}
		sum := sha256.Sum256([]byte(s[:j]))
		hashes = append(hashes, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")
		s = s[j:]
	}
	return "default-src 'none'; script-src " + strings.Join(hashes, " ") +
		"; style-src 'unsafe-inline'; connect-src 'self'; media-src 'self' blob:; img-src 'self' blob: data:" +
		"; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}

// randomID returns n random bytes in hex.
func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails since Go 1.24
	return hex.EncodeToString(b)
}
