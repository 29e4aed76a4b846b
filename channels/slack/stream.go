package slack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
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

// maxIDLen bounds a Slack id the admin API takes: Slack's are 9 or 11 characters today,
// and Slack tells apps to expect longer ones, but not this long.
const maxIDLen = 32

// CheckTarget refuses a channel id or thread Slack cannot have (channels.TargetChecker):
// a conversation id is C, D or G followed by capital letters and digits; a thread is
// named by its first message's timestamp (seconds, a dot, a fraction). Open does not ask
// it: the ids it is given come from Slack itself.
func (c *Channel) CheckTarget(t channels.Target) error {
	if !conversationID(t.ChatID) {
		return channels.BadTarget(fmt.Errorf("slack: %.64q is not a Slack channel or user id (C, D, G, U or W followed by capital letters and digits, like C0123ABCDEF)", t.ChatID))
	}
	if t.ThreadID != "" && !messageTS(t.ThreadID) {
		return channels.BadTarget(fmt.Errorf("slack: %.64q is not a Slack thread (its first message's timestamp, like 1712345678.123456)", t.ThreadID))
	}
	return nil
}

// conversationID reports whether id has the form of a Slack channel, group or DM id, or of
// a user's (U, or W on Enterprise Grid): chat.postMessage takes a user id as the app's DM
// with that user, which is how a reminder reaches someone by name.
func conversationID(id string) bool {
	if len(id) < 2 || len(id) > maxIDLen || !strings.ContainsRune("CDGUW", rune(id[0])) {
		return false
	}
	for i := 1; i < len(id); i++ {
		if b := id[i]; (b < 'A' || b > 'Z') && (b < '0' || b > '9') {
			return false
		}
	}
	return true
}

// messageTS reports whether ts has the form of a Slack message timestamp: digits, a dot,
// digits.
func messageTS(ts string) bool {
	sec, frac, ok := strings.Cut(ts, ".")
	return ok && len(ts) <= maxIDLen && digits(sec) && digits(frac)
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
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
	st := &stream{c: c, target: target, channel: channel, thread: thread, placement: target.Resume}
	// The placement: the answer's messages, then after a ';' its parts (filePrefix marks a
	// file). One without ';' is from before parts were kept.
	text, parts, _ := strings.Cut(target.Resume, ";")
	for ts := range strings.SplitSeq(text, ",") {
		if ts != "" {
			st.msgs = append(st.msgs, shown{ts: ts, old: true})
		}
	}
	for p := range strings.SplitSeq(parts, ",") {
		if p != "" {
			st.oldParts = append(st.oldParts, p)
		}
	}
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
	// placement is what target.Placed was last told: the ts of msgs, then those of the parts.
	placement string

	// partsSent are the parts sent (message:send's text, voice, files): a message's ts, or
	// filePrefix and an uploaded file's id.
	partsSent []string
	// oldParts are the parts of an earlier attempt at this answer, cut by a crash
	// (Target.Resume), in the same form: removed before this answer's parts, which take
	// their place.
	oldParts []string
}

// filePrefix marks a file's id among the parts of a placement, apart from a message's ts.
const filePrefix = "f:"

type shown struct {
	ts   string
	text string // "" for one of an earlier attempt, not yet edited
	old  bool   // posted by an earlier attempt at this answer, cut by a crash (Target.Resume)
}

// report tells target.Placed the answer's messages, when they changed since the last time.
func (s *stream) report() {
	tss := make([]string, len(s.msgs))
	for i, m := range s.msgs {
		tss[i] = m.ts
	}
	p := strings.Join(tss, ",")
	if parts := append(slices.Clone(s.oldParts), s.partsSent...); len(parts) > 0 {
		p += ";" + strings.Join(parts, ",")
	}
	if p != s.placement && s.target.Placed != nil {
		s.placement = p
		s.target.Placed(p)
	}
}

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
		s.dropOldParts(ctx)
		if err := s.flush(ctx, true); err != nil {
			return err
		}
		for _, p := range f.Parts {
			if err := s.sendPart(ctx, p); err != nil {
				return err
			}
		}
	case channels.FrameDone:
		s.dropOldParts(ctx)
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
	for i := 0; i < len(chunks); i++ {
		ch := chunks[i]
		if i < len(s.msgs) {
			if s.msgs[i].text == ch {
				continue
			}
			gone, err := s.c.update(ctx, snd, s.channel, s.msgs[i].ts, ch)
			if s.msgs[i].old && gone {
				// A message of the answer the restart cut, deleted since: the answer goes
				// on without it, in new messages if need be.
				s.c.log.Info("slack: a message of the answer cut by the restart cannot be edited; the answer goes on without it", "chat", s.channel, "ts", s.msgs[i].ts, "err", err)
				s.msgs = slices.Delete(s.msgs, i, i+1)
				s.report()
				i--
				continue
			}
			if err != nil {
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
		s.report()
		s.answered()
	}
	for len(s.msgs) > len(chunks) {
		last := s.msgs[len(s.msgs)-1]
		if err := s.c.delete(ctx, snd, s.channel, last.ts); err != nil {
			return err
		}
		s.msgs = s.msgs[:len(s.msgs)-1]
		s.report()
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
		tss, err := s.c.postText(ctx, s.channel, s.thread, markdown.Mrkdwn(p.Text))
		s.partSent(tss...)
		if err != nil {
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
		id, err := s.c.upload(ctx, s.channel, s.thread, p, data)
		if err != nil {
			return err
		}
		if id != "" {
			s.partSent(filePrefix + id)
		}
		s.answered()
	}
	return nil
}

// partSent keeps parts sent, so that an answer cut by a crash after them replaces them
// rather than sending them a second time.
func (s *stream) partSent(parts ...string) {
	if len(parts) > 0 {
		s.partsSent = append(s.partsSent, parts...)
		s.report()
	}
}

// dropOldParts deletes the parts an earlier attempt at this answer sent before a crash cut
// it: this answer sends its own, and the chat shows each once. One Slack says is gone
// already is forgotten; one that cannot be deleted is logged and left.
func (s *stream) dropOldParts(ctx context.Context) {
	for len(s.oldParts) > 0 {
		p := s.oldParts[0]
		var err error
		if id, ok := strings.CutPrefix(p, filePrefix); ok {
			err = s.c.deleteFile(ctx, s.channel, id)
		} else {
			err = s.c.delete(ctx, &s.c.send, s.channel, p)
		}
		if err != nil {
			s.c.log.Warn("slack: a part of the answer cut by the restart could not be removed", "chat", s.channel, "part", p, "err", err)
		}
		s.oldParts = s.oldParts[1:]
		s.report()
	}
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

// update makes message ts show text; gone reports Slack answering that the message cannot
// be edited any more (deleted), which the error, scrubbed, no longer tells.
func (c *Channel) update(ctx context.Context, snd *channels.Sender, channel, ts, text string) (gone bool, err error) {
	err = failed("chat.update", channel, snd.Do(ctx, channel, func(ctx context.Context) error {
		_, _, _, err := c.api.UpdateMessageContext(ctx, channel, ts, slackgo.MsgOptionText(text, false))
		e := slackError(err)
		gone = e == "message_not_found" || e == "cant_update_message"
		return err
	}))
	return gone, err
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

// deleteFile deletes a file the bot uploaded, and with it its message in channel; one
// already deleted is no error.
func (c *Channel) deleteFile(ctx context.Context, channel, id string) error {
	return failed("files.delete", channel, c.send.Do(ctx, channel, func(ctx context.Context) error {
		err := c.api.DeleteFileContext(ctx, id)
		if e := slackError(err); e == "file_not_found" || e == "file_deleted" {
			return nil
		}
		return err
	}))
}

// upload shares a file into the thread with the external upload flow
// (files.getUploadURLExternal, the upload, files.completeUploadExternal) and returns the
// file's id.
func (c *Channel) upload(ctx context.Context, channel, thread string, p channels.Part, data []byte) (string, error) {
	name := p.Name
	if name == "" {
		name = defaultName(p)
	}
	title := name
	if p.Type == channels.PartAudio && p.Voice {
		title = "Voice message"
	}
	var id string
	err := c.transfer.Do(ctx, channel, func(ctx context.Context) error {
		f, err := c.api.UploadFileContext(ctx, slackgo.UploadFileParameters{
			Filename: name, FileSize: len(data), Reader: bytes.NewReader(data),
			Title: title, Channel: channel, ThreadTimestamp: thread,
		})
		if f != nil {
			id = f.ID
		}
		return err
	})
	return id, failed("file upload", channel, err)
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
