package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	slackgo "github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"gateway/channels"
	"gateway/internal/markdown"
)

// inner is what the adapter reads of a message or app_mention event.
type inner struct {
	Type         string         `json:"type"`
	SubType      string         `json:"subtype"`
	Channel      string         `json:"channel"`
	ChannelType  string         `json:"channel_type"`
	User         string         `json:"user"`
	BotID        string         `json:"bot_id"`
	Text         string         `json:"text"`
	TS           string         `json:"ts"`
	ThreadTS     string         `json:"thread_ts"`
	ParentUserID string         `json:"parent_user_id"`
	Files        []slackgo.File `json:"files"`
	Attachments  []attachment   `json:"attachments"`
}

// attachment is what the adapter reads of a message attachment: a forwarded (shared)
// message arrives as one, with the forwarded text in it. Read here rather than with
// slackgo.Attachment, whose blocks could fail to parse and lose the whole message.
type attachment struct {
	Fallback    string         `json:"fallback"`
	AuthorName  string         `json:"author_name"`
	AuthorSub   string         `json:"author_subname"`
	Title       string         `json:"title"`
	TitleLink   string         `json:"title_link"`
	Pretext     string         `json:"pretext"`
	Text        string         `json:"text"`
	FromURL     string         `json:"from_url"`
	IsShare     bool           `json:"is_share"`
	IsMsgUnfurl bool           `json:"is_msg_unfurl"`
	Files       []slackgo.File `json:"files"`
}

// handleCallback handles one Events API callback. It returns nil when the event may be
// acknowledged: the message was delivered, or deliberately dropped (a redelivery, a bot,
// a stranger, no mention, a file too large). An error means: do not acknowledge, so that
// Slack sends it again.
//
// A message is identified by channel and ts: a redelivered envelope (same event_id), a
// retried HTTP request, and the app_mention event Slack sends beside the message event
// for the same message all share it.
func (c *Channel) handleCallback(ctx context.Context, cb *slackevents.EventsAPICallbackEvent) error {
	sink, _, ok := c.running()
	if !ok {
		return errors.New("slack: not running")
	}
	if cb == nil || cb.InnerEvent == nil {
		return nil
	}
	var ev inner
	if err := json.Unmarshal(*cb.InnerEvent, &ev); err != nil {
		c.log.Warn("slack: dropped an event that does not parse", "event_id", cb.EventID, "err", err)
		return nil
	}
	if ev.Type != "message" && ev.Type != "app_mention" {
		return nil
	}
	switch ev.SubType {
	case "", "file_share", "thread_broadcast", "me_message":
	default: // edits, deletions, joins, bot_message...
		return nil
	}
	bot, mention := c.bot()
	if ev.BotID != "" || ev.User == "" || ev.User == bot || ev.TS == "" || ev.Channel == "" {
		return nil
	}
	release, dup, err := c.claims.claim(ctx, ev.Channel+":"+ev.TS)
	if err != nil {
		return err
	}
	if dup {
		c.log.Debug("slack: dropped a redelivered message", "event_id", cb.EventID, "chat", ev.Channel, "ts", ev.TS)
		return nil
	}
	taken := false
	defer func() { release(taken) }()

	msg, text := c.normalise(ev, bot, mention)
	target := channels.TargetOf(msg)
	switch c.cfg.Access.Check(msg) {
	case channels.NotAllowed:
		c.log.Info("slack: message from a user not on allow_from", "user", ev.User, "chat", ev.Channel)
		if msg.ChatType == channels.ChatDM {
			c.notice(ctx, target, channels.NotAllowedText(ev.User))
		}
		taken = true
		return nil
	case channels.NotMentioned:
		taken = true
		return nil
	}
	var parts []channels.Part
	if cmd := threadCommand(ev, msg, text); cmd != "" {
		msg.Parts = []channels.Part{channels.TextPart(cmd)}
	} else {
		// Looked up only now, for a message that will be delivered; one budget for all
		// the names, since Slack wants its ack within 3s.
		nctx, cancel := context.WithTimeout(ctx, nameTimeout)
		msg.UserName = c.names.get(nctx, ev.User)
		msg.Parts = c.textParts(ev, text, c.mentionedNames(nctx, textsOf(ev, text)...))
		cancel()
		var refusal string
		parts, refusal = c.download(ctx, ev)
		if refusal != "" {
			c.notice(ctx, target, refusal)
			taken = true
			return nil
		}
		msg.Parts = append(msg.Parts, parts...)
		for _, p := range parts {
			if p.Type == channels.PartAudio {
				msg.IsVoice = true
			}
		}
		if len(msg.Parts) == 0 {
			// Whatever a person sent the bot gets an answer, even when nothing in it is readable.
			msg.Parts = append(msg.Parts, channels.TextPart("[a message with no text or file that I can read]"))
		}
	}
	dctx, cancel := context.WithTimeout(ctx, deliverTimeout)
	defer cancel()
	if err := sink.Deliver(dctx, msg); err != nil {
		for _, p := range parts {
			os.Remove(p.Path)
		}
		return fmt.Errorf("slack: the gateway did not take message %s in %s: %w", ev.TS, ev.Channel, err)
	}
	taken = true
	if msg.ChatType == channels.ChatGroup {
		// A slash command in this channel acts on the user's latest conversation here.
		c.lastThread.put(ev.Channel+":"+ev.User, msg.ThreadID)
	}
	return nil
}

// threadCommand is the command a message in a thread stands for, or "": Slack does not
// allow slash commands in threads, so there "stop" or "new" addressed to the bot is
// /stop or /new.
func threadCommand(ev inner, msg *channels.Message, text string) string {
	if ev.ThreadTS == "" || ev.ThreadTS == ev.TS || len(ev.Files) > 0 || len(ev.Attachments) > 0 {
		return ""
	}
	if msg.ChatType == channels.ChatGroup && !msg.Mentioned {
		return ""
	}
	switch word := strings.ToLower(strings.TrimSpace(text)); word {
	case "stop", "new":
		return "/" + word
	}
	return ""
}

// normalise turns an event into a message without its content, and returns its text with
// the bot's mention removed but Slack's markup still in it.
func (c *Channel) normalise(ev inner, bot string, mention *regexp.Regexp) (*channels.Message, string) {
	dm := ev.ChannelType == "im" || (ev.ChannelType == "" && strings.HasPrefix(ev.Channel, "D"))
	mentioned := ev.Type == "app_mention" || mention.MatchString(ev.Text)
	text := strings.TrimSpace(mention.ReplaceAllString(ev.Text, ""))

	m := &channels.Message{
		ID:       ev.TS,
		Channel:  Name,
		ChatID:   ev.Channel,
		ThreadID: ev.ThreadTS,
		UserID:   ev.User,
		ChatType: channels.ChatDM,
		Time:     tsTime(ev.TS),
	}
	if !dm {
		m.ChatType = channels.ChatGroup
		if m.ThreadID == "" {
			// The answer starts a thread under this message, and the conversation goes on
			// there: the thread is the session from the first message on.
			m.ThreadID = ev.TS
		} else if c.threads.has(ev.Channel+":"+ev.ThreadTS) || ev.ParentUserID == bot {
			// A thread the bot takes part in is addressed to it without a new mention.
			mentioned = true
		}
	}
	m.Mentioned = mentioned
	return m, text
}

// textsOf lists the texts of a message that may mention users.
func textsOf(ev inner, text string) []string {
	out := []string{text}
	for _, a := range ev.Attachments {
		out = append(out, a.Text, a.Pretext)
	}
	return out
}

// textParts is the message's text in plain words: its own text, a forwarded message in
// it, and a word about each file that will not be downloaded.
func (c *Channel) textParts(ev inner, text string, name func(string) string) []channels.Part {
	var parts []channels.Part
	add := func(s string) {
		if s = strings.TrimSpace(s); s != "" {
			parts = append(parts, channels.TextPart(s))
		}
	}
	text = plainText(text, name)
	if ev.SubType == "me_message" && strings.TrimSpace(text) != "" {
		text = "*" + strings.TrimSpace(text) + "*" // "/me waves": an action, as Slack shows it
	}
	add(text)
	for _, a := range ev.Attachments {
		add(describeAttachment(a, name))
	}
	for _, f := range ev.Files {
		if !downloadable(f) {
			add(fmt.Sprintf("[shared a file I cannot open: %s%s]", displayName(f.Name), orEmpty(" ", f.Permalink)))
		}
	}
	return parts
}

// describeAttachment puts an attachment in words: a forwarded message with its author
// and text, else its title and text.
func describeAttachment(a attachment, name func(string) string) string {
	body := plainText(strings.TrimSpace(a.Text), name)
	if body == "" {
		body = plainText(strings.TrimSpace(a.Fallback), name)
	}
	var b strings.Builder
	if a.IsShare || a.IsMsgUnfurl {
		who := plainText(firstOf(a.AuthorName, a.AuthorSub), name)
		if who != "" {
			fmt.Fprintf(&b, "[forwarded message from %s]", who)
		} else {
			b.WriteString("[forwarded message]")
		}
		if body != "" {
			b.WriteString("\n" + body)
		}
		for _, f := range a.Files {
			fmt.Fprintf(&b, "\n[with a file: %s]", displayName(f.Name))
		}
		return b.String()
	}
	title := plainText(strings.TrimSpace(firstOf(a.Title, a.Pretext)), name)
	if title != "" && a.TitleLink != "" {
		title += " (" + a.TitleLink + ")"
	}
	switch {
	case title != "" && body != "":
		return "[attachment] " + title + "\n" + body
	case title != "":
		return "[attachment] " + title
	case body != "":
		return "[attachment] " + body
	}
	return ""
}

func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// orEmpty is prefix+s, or "" when s is empty.
func orEmpty(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// downloadable reports whether the adapter fetches f: a file stored in Slack that the
// bot may read.
func downloadable(f slackgo.File) bool {
	if f.IsExternal || f.Mode == "external" || f.Mode == "tombstone" || f.Mode == "hidden_by_limit" {
		return false
	}
	return f.URLPrivateDownload != "" || f.URLPrivate != ""
}

// tsTime reads a Slack ts ("1700000000.000100") as a time.
func tsTime(ts string) time.Time {
	sec, frac, _ := strings.Cut(ts, ".")
	s, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Now()
	}
	us, _ := strconv.ParseInt((frac + "000000")[:6], 10, 64)
	return time.Unix(s, us*1000)
}

// download fetches the message's files with the bot token into parts. refusal is the
// reply to send instead of delivering when a file is too large or cannot be fetched.
func (c *Channel) download(ctx context.Context, ev inner) (parts []channels.Part, refusal string) {
	limit := c.cfg.maxFileBytes()
	for _, f := range ev.Files {
		if downloadable(f) && int64(f.Size) > limit {
			return nil, tooLarge(f.Name, int64(f.Size), limit)
		}
	}
	if len(ev.Files) > 0 {
		c.prune()
	}
	for i, f := range ev.Files {
		if !downloadable(f) {
			continue // described in words by textParts
		}
		u := f.URLPrivateDownload
		if u == "" {
			u = f.URLPrivate
		}
		path := filepath.Join(c.dir, fmt.Sprintf("%s-%s-%d-%s", safeName(ev.Channel), strings.ReplaceAll(ev.TS, ".", ""), i, safeName(f.Name)))
		n, err := c.fetch(ctx, u, path, limit)
		if err != nil {
			for _, p := range parts {
				os.Remove(p.Path)
			}
			if errors.Is(err, channels.ErrTooLarge) {
				return nil, tooLarge(f.Name, 0, limit) // Slack announced a smaller size
			}
			c.log.Warn("slack: could not download a file", "file", f.ID, "err", c.scrub.Wrap(err))
			return nil, fmt.Sprintf("Sorry, I could not download %s. Please send it again.", displayName(f.Name))
		}
		p := channels.Part{Type: channels.PartFile, MIME: f.Mimetype, Path: path, Name: f.Name, Size: n}
		switch {
		case strings.HasPrefix(f.Mimetype, "audio/") || f.MediaDisplayType == "audio":
			p.Type = channels.PartAudio
			p.Voice = f.MediaDisplayType == "audio" // an audio clip recorded in Slack
			p.Duration = float64(f.DurationMs) / 1000
		case strings.HasPrefix(f.Mimetype, "image/"):
			p.Type = channels.PartImage
		}
		parts = append(parts, p)
	}
	return parts, ""
}

// fetch downloads url to path, stopping past limit bytes (channels.ErrTooLarge).
func (c *Channel) fetch(ctx context.Context, url, path string, limit int64) (int64, error) {
	var n int64
	over := false
	err := c.transfer.Do(ctx, "", func(ctx context.Context) error {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		w := &limitWriter{w: f, left: limit}
		err = c.api.GetFileContext(ctx, url, w)
		n = w.n
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if over = w.over; over {
			return channels.ErrTooLarge
		}
		return err
	})
	if err != nil {
		os.Remove(path)
	}
	if over {
		return n, channels.ErrTooLarge // Do's error is scrubbed: it no longer says so
	}
	return n, err
}

type limitWriter struct {
	w    io.Writer
	n    int64
	left int64
	over bool
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.left {
		l.over = true
		return 0, channels.ErrTooLarge
	}
	n, err := l.w.Write(p)
	l.n += int64(n)
	l.left -= int64(n)
	return n, err
}

// tooLarge is the reply to a file over the limit; size 0 means unknown.
func tooLarge(name string, size, limit int64) string {
	if size <= limit {
		return fmt.Sprintf("Sorry, %s is larger than the %s I can take.", displayName(name), megabytes(limit))
	}
	return fmt.Sprintf("Sorry, %s is too large (%s); I can take files up to %s.", displayName(name), megabytes(size), megabytes(limit))
}

func megabytes(n int64) string {
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MB"
}

func displayName(name string) string {
	if name == "" {
		return "your file"
	}
	return name
}

// safeName keeps a file name usable in a path: letters, digits, dot, dash, underscore.
func safeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
		if b.Len() >= 80 {
			break
		}
	}
	out := strings.TrimLeft(b.String(), ".")
	if out == "" {
		return "file"
	}
	return out
}

// notice posts a plain reply where target points, logging failures: it is best effort.
func (c *Channel) notice(ctx context.Context, target channels.Target, text string) {
	channel, thread := replyPlace(target)
	if _, err := c.post(ctx, &c.send, channel, thread, markdown.EscapeMrkdwn(text)); err != nil {
		c.log.Warn("slack: could not post a notice", "chat", channel, "err", err)
	}
}
