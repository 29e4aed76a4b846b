package slack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	slackgo "github.com/slack-go/slack"

	"gateway/channels"
	"gateway/internal/markdown"
)

const (
	typingReaction = "hourglass_flowing_sand"
	thinkingStatus = "is thinking…"
	maxUploadBytes = 1 << 30 // Slack's own file size limit
)

// replyPlace is where an answer to target goes: the thread of the message, or a new
// thread under it when it was top-level in a channel; inline in a DM.
func replyPlace(t channels.Target) (channel, thread string) {
	thread = t.ThreadID
	if thread == "" && t.ChatType == channels.ChatGroup {
		thread = t.ReplyToID
	}
	return t.ChatID, thread
}

// Open starts an answer to target.
func (c *Channel) Open(ctx context.Context, target channels.Target) (channels.Stream, error) {
	if _, _, ok := c.running(); !ok {
		return nil, errors.New("slack: the channel is not running")
	}
	if target.ChatID == "" {
		return nil, errors.New("slack: the answer has no chat id")
	}
	channel, thread := replyPlace(target)
	st := &stream{c: c, target: target, channel: channel, thread: thread}
	if isSlashID(target.ReplyToID) {
		// The answer to a slash command: the command is no message to thread under or
		// react to. In a channel its reply goes to its user alone, while the adapter
		// remembers who that was; in a DM it stays in the conversation, as ephemeral
		// messages vanish there and nobody else is in it to spare.
		st.thread = target.ThreadID
		if info, ok := c.commands.get(target.ReplyToID); ok && target.ChatType == channels.ChatGroup {
			st.slash = &info
		}
	}
	return st, nil
}

type stream struct {
	c        *Channel
	target   channels.Target
	channel  string
	thread   string
	text     strings.Builder // the answer's Markdown so far
	msgs     []shown         // the messages showing it, in order
	dirty    bool            // text changed since the last edit
	lastEdit time.Time
	status   bool // an assistant status is shown
	reacted  bool // the typing reaction is on the user's message
	started  bool // a turn runs (start frame): an answer, not a one-shot notice
	slash    *slashInfo
	ended    bool
}

type shown struct{ ts, text string }

// Send renders one frame; see channels.Stream.
func (s *stream) Send(ctx context.Context, f channels.Frame) error {
	if s.ended {
		return errors.New("slack: the answer already ended")
	}
	switch f.Type {
	case channels.FrameStart:
		s.started = true
		s.typingOn(ctx)
	case channels.FrameDelta:
		s.text.WriteString(f.Text)
		s.dirty = true
		return s.flush(ctx, false)
	case channels.FrameTool:
		if f.Tool != nil {
			st := thinkingStatus
			if f.Tool.Phase == "start" {
				st = "is using " + f.Tool.Name + "…"
			}
			s.setStatus(ctx, st)
		}
		return s.flush(ctx, false)
	case channels.FrameStatus:
		if f.Text != "" {
			s.setStatus(ctx, f.Text)
		}
		return s.flush(ctx, false)
	case channels.FrameParts:
		if err := s.flush(ctx, true); err != nil {
			return err
		}
		for _, p := range f.Parts {
			if err := s.sendPart(ctx, p); err != nil {
				return err
			}
		}
	case channels.FrameDone:
		if s.slash != nil && !s.started && len(s.msgs) == 0 && s.text.Len() == 0 && f.Text != "" {
			// A command's reply is for the user who typed it.
			err := s.c.ephemeral(ctx, s.channel, s.thread, s.slash.user, f.Text)
			s.end(ctx)
			return err
		}
		if f.Text != "" {
			s.text.Reset()
			s.text.WriteString(f.Text)
		}
		err := s.sync(ctx, s.text.String(), &s.c.send)
		s.end(ctx)
		return err
	case channels.FrameError:
		err := s.flush(ctx, true)
		text := f.Text
		if text == "" {
			text = "Sorry, something went wrong."
		}
		_, perr := s.c.postText(ctx, s.channel, s.thread, ":warning: "+markdown.EscapeMrkdwn(text))
		s.end(ctx)
		return errors.Join(err, perr)
	}
	return nil
}

// flush shows the text so far, at most once per editInterval unless forced. An unforced
// flush is an intermediate edit: it is tried once, and skips its turn while a rate limit
// holds the chat, so that streaming never stalls the turn; a forced one waits the hold out.
func (s *stream) flush(ctx context.Context, force bool) error {
	if !s.dirty {
		return nil
	}
	if !force {
		if time.Since(s.lastEdit) < editInterval || s.c.send.Held(s.channel) {
			return nil
		}
		if err := s.sync(ctx, s.text.String(), &s.c.optional); err != nil {
			s.c.log.Debug("slack: streaming edit postponed", "chat", s.channel, "err", err)
		}
		return nil
	}
	return s.sync(ctx, s.text.String(), &s.c.send)
}

// sync makes the answer's messages show md through snd: chunks that changed are edited,
// new chunks are posted, and chunks no longer needed are deleted.
func (s *stream) sync(ctx context.Context, md string, snd *channels.Sender) error {
	var chunks []string
	for _, ch := range markdown.Split(markdown.Mrkdwn(md), MaxTextLen, utf8.RuneCountInString) {
		if strings.TrimSpace(ch) != "" {
			chunks = append(chunks, ch)
		}
	}
	defer func() { s.lastEdit = time.Now() }()
	for i, ch := range chunks {
		if i < len(s.msgs) {
			if s.msgs[i].text == ch {
				continue
			}
			if err := s.c.update(ctx, snd, s.channel, s.msgs[i].ts, ch); err != nil {
				return err
			}
			s.msgs[i].text = ch
			continue
		}
		ts, err := s.c.post(ctx, snd, s.channel, s.thread, ch)
		if err != nil {
			return err
		}
		s.msgs = append(s.msgs, shown{ts: ts, text: ch})
		s.answered()
	}
	for len(s.msgs) > len(chunks) {
		last := s.msgs[len(s.msgs)-1]
		if err := s.c.delete(ctx, snd, s.channel, last.ts); err != nil {
			return err
		}
		s.msgs = s.msgs[:len(s.msgs)-1]
	}
	s.dirty = false
	return nil
}

// answered remembers that the bot takes part in this thread, so that replies there need
// no mention.
func (s *stream) answered() {
	if s.thread != "" && s.target.ChatType == channels.ChatGroup {
		s.c.threads.add(s.channel + ":" + s.thread)
	}
}

func (s *stream) sendPart(ctx context.Context, p channels.Part) error {
	switch p.Type {
	case channels.PartText:
		if _, err := s.c.postText(ctx, s.channel, s.thread, markdown.Mrkdwn(p.Text)); err != nil {
			return err
		}
		s.answered()
		return nil
	case channels.PartAudio, channels.PartImage, channels.PartFile:
		data, err := channels.ReadPart(p, maxUploadBytes)
		if err != nil {
			return fmt.Errorf("slack: cannot upload: %w", err)
		}
		if len(data) == 0 {
			return errors.New("slack: a media part has no data to upload")
		}
		if err := s.c.upload(ctx, s.channel, s.thread, p, data); err != nil {
			return err
		}
		s.answered()
	}
	return nil
}

// typingOn shows that the turn runs: the assistant thread status where Slack allows it,
// else a reaction on the user's message. Best effort: failures are logged, and it skips
// its turn while a rate limit holds the chat.
func (s *stream) typingOn(ctx context.Context) {
	if s.status || s.reacted || s.c.send.Held(s.channel) {
		return
	}
	if s.thread != "" && !s.c.noStatus.has(s.channel) {
		if s.setStatus(ctx, thinkingStatus) {
			return
		}
	}
	if s.target.ReplyToID == "" || isSlashID(s.target.ReplyToID) {
		return
	}
	err := s.c.optional.Do(ctx, s.channel, func(ctx context.Context) error {
		err := s.c.api.AddReactionContext(ctx, typingReaction, slackgo.NewRefToMessage(s.channel, s.target.ReplyToID))
		if slackError(err) == "already_reacted" {
			return nil
		}
		return err
	})
	if err == nil {
		s.reacted = true
		return
	}
	s.c.log.Debug("slack: could not add the typing reaction", "chat", s.channel, "err", err)
}

// setStatus sets the assistant thread status and reports whether it is shown. A refusal
// other than a transient failure marks the channel as one without statuses. It skips its
// turn while a rate limit holds the chat.
func (s *stream) setStatus(ctx context.Context, status string) bool {
	if s.thread == "" || s.c.noStatus.has(s.channel) || (s.reacted && !s.status) || s.c.send.Held(s.channel) {
		return false
	}
	refused := false
	err := s.c.optional.Do(ctx, s.channel, func(ctx context.Context) error {
		err := s.c.api.SetAssistantThreadsStatusContext(ctx, slackgo.AssistantThreadsSetStatusParameters{
			ChannelID: s.channel, ThreadTS: s.thread, Status: status,
		})
		retry, _ := retryable(err)
		refused = err != nil && !retry && !errors.Is(err, context.Canceled) // a refusal, not a hiccup
		return err
	})
	if err == nil {
		s.status = status != ""
		return true
	}
	if refused {
		s.c.noStatus.add(s.channel)
	}
	s.c.log.Debug("slack: assistant status not available", "chat", s.channel, "err", err)
	return false
}

// end clears the typing signal; the answer is over. Unlike typing, the clean-up waits
// out a hold on the chat (within callTimeout): a signal left on would say the bot works.
func (s *stream) end(ctx context.Context) {
	s.ended = true
	// Clean up even when the turn's context was cancelled.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	if s.status {
		if err := s.c.optional.Do(ctx, s.channel, func(ctx context.Context) error {
			return s.c.api.SetAssistantThreadsStatusContext(ctx, slackgo.AssistantThreadsSetStatusParameters{
				ChannelID: s.channel, ThreadTS: s.thread, Status: "",
			})
		}); err != nil {
			s.c.log.Debug("slack: could not clear the assistant status", "chat", s.channel, "err", err)
		}
		s.status = false
	}
	if s.reacted {
		if err := s.c.optional.Do(ctx, s.channel, func(ctx context.Context) error {
			err := s.c.api.RemoveReactionContext(ctx, typingReaction, slackgo.NewRefToMessage(s.channel, s.target.ReplyToID))
			if slackError(err) == "no_reaction" {
				return nil
			}
			return err
		}); err != nil {
			s.c.log.Debug("slack: could not remove the typing reaction", "chat", s.channel, "err", err)
		}
		s.reacted = false
	}
}

// failed names the Web API call a send failed in; nil stays nil. err is scrubbed already.
func failed(what, channel string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("slack: %s in %s: %w", what, channel, err)
}

// post posts mrkdwn text (at most MaxTextLen) through snd and returns the message ts.
func (c *Channel) post(ctx context.Context, snd *channels.Sender, channel, thread, text string) (string, error) {
	opts := []slackgo.MsgOption{slackgo.MsgOptionText(text, false)}
	if thread != "" {
		opts = append(opts, slackgo.MsgOptionTS(thread))
	}
	var ts string
	err := snd.Do(ctx, channel, func(ctx context.Context) error {
		var err error
		_, ts, err = c.api.PostMessageContext(ctx, channel, opts...)
		return err
	})
	return ts, failed("chat.postMessage", channel, err)
}

// postText posts mrkdwn of any length, split at MaxTextLen.
func (c *Channel) postText(ctx context.Context, channel, thread, text string) ([]string, error) {
	var tss []string
	for _, ch := range markdown.Split(text, MaxTextLen, utf8.RuneCountInString) {
		if strings.TrimSpace(ch) == "" {
			continue
		}
		ts, err := c.post(ctx, &c.send, channel, thread, ch)
		if err != nil {
			return tss, err
		}
		tss = append(tss, ts)
	}
	return tss, nil
}

func (c *Channel) update(ctx context.Context, snd *channels.Sender, channel, ts, text string) error {
	return failed("chat.update", channel, snd.Do(ctx, channel, func(ctx context.Context) error {
		_, _, _, err := c.api.UpdateMessageContext(ctx, channel, ts, slackgo.MsgOptionText(text, false))
		return err
	}))
}

func (c *Channel) delete(ctx context.Context, snd *channels.Sender, channel, ts string) error {
	return failed("chat.delete", channel, snd.Do(ctx, channel, func(ctx context.Context) error {
		_, _, err := c.api.DeleteMessageContext(ctx, channel, ts)
		if slackError(err) == "message_not_found" {
			return nil
		}
		return err
	}))
}

// upload shares a file into the thread with the external upload flow
// (files.getUploadURLExternal, the upload, files.completeUploadExternal).
func (c *Channel) upload(ctx context.Context, channel, thread string, p channels.Part, data []byte) error {
	name := p.Name
	if name == "" {
		name = defaultName(p)
	}
	title := name
	if p.Type == channels.PartAudio && p.Voice {
		title = "Voice message"
	}
	return failed("file upload", channel, c.transfer.Do(ctx, channel, func(ctx context.Context) error {
		_, err := c.api.UploadFileContext(ctx, slackgo.UploadFileParameters{
			Filename: name, FileSize: len(data), Reader: bytes.NewReader(data),
			Title: title, Channel: channel, ThreadTimestamp: thread,
		})
		return err
	}))
}

func defaultName(p channels.Part) string {
	base := map[channels.PartType]string{channels.PartAudio: "voice", channels.PartImage: "image"}[p.Type]
	if base == "" {
		base = "file"
	}
	mime, _, _ := strings.Cut(p.MIME, ";")
	ext := map[string]string{
		"audio/ogg": ".ogg", "audio/opus": ".opus", "audio/mpeg": ".mp3", "audio/mp4": ".m4a", "audio/wav": ".wav",
		"audio/x-wav": ".wav", "audio/webm": ".webm", "audio/flac": ".flac", "image/png": ".png", "image/jpeg": ".jpg",
		"image/gif": ".gif", "image/webp": ".webp", "application/pdf": ".pdf", "text/plain": ".txt",
	}[strings.TrimSpace(mime)]
	if ext == "" {
		ext = ".bin"
	}
	return base + ext
}
