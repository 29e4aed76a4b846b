package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
// a stranger, no mention). Its files are delivered as references (Part.Ref) and
// downloaded later by Fetch, so that a slow download holds up no other message. An error
// means: do not acknowledge, so that Slack sends it again.
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
		if msg.ChatType == channels.ChatDM && c.strangers.Allow(ev.User, time.Now()) {
			c.tellStranger(target, ev.User)
		}
		taken = true
		return nil
	case channels.NotMentioned:
		taken = true
		return nil
	}
	if cmd := threadCommand(ev, msg, text); cmd != "" {
		msg.Parts = []channels.Part{channels.TextPart(cmd)}
	} else {
		// Looked up only now, for a message that will be delivered; one budget for all
		// the names, since Slack wants its ack within 3s.
		nctx, cancel := context.WithTimeout(ctx, nameTimeout)
		msg.UserName = c.names.get(nctx, ev.User)
		var words bool
		msg.Parts, words = c.textParts(ev, text, c.mentionedNames(nctx, textsOf(ev, text)...))
		cancel()
		// Files go as references, fetched later on the chat's session (see Fetch): the
		// intake never waits on a download.
		parts := fileRefs(ev, words)
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
// it, and a word about each file that will not be downloaded. words says it has more than
// those words about files: something the user wrote or forwarded.
func (c *Channel) textParts(ev inner, text string, name func(string) string) (parts []channels.Part, words bool) {
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
	words = len(parts) > 0 // the notes below are ours, about files
	for _, f := range ev.Files {
		if !downloadable(f) {
			add(fmt.Sprintf("[shared a file I cannot open: %s%s]", displayName(f.Name), orEmpty(" ", f.Permalink)))
		}
	}
	return parts, words
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

func displayName(name string) string {
	if name == "" {
		return "your file"
	}
	return name
}

// tellStranger posts the not-allowed notice off the event loop, which takes every chat's
// events in turn and owes Slack an ack within 3 s (channels.Notices).
func (c *Channel) tellStranger(target channels.Target, user string) {
	if !c.strangers.Tell(&c.notices, c.life, c.log, user, func(ctx context.Context, text string) { c.notice(ctx, target, text) }) {
		c.log.Warn("slack: too many notices in flight; one was not sent", "chat", target.ChatID)
	}
}

// notice posts a plain reply where target points, logging failures: it is best effort.
func (c *Channel) notice(ctx context.Context, target channels.Target, text string) {
	channel, thread := replyPlace(target)
	if _, err := c.post(ctx, &c.send, channel, thread, markdown.EscapeMrkdwn(text)); err != nil {
		c.log.Warn("slack: could not post a notice", "chat", channel, "err", err)
	}
}
