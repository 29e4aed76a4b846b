package telegram

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"gateway/channels"
	"gateway/internal/audio"
	"gateway/internal/markdown"
)

// maxTyping bounds the typing indicator of an answer whose done never comes.
const maxTyping = 10 * time.Minute

// maxUpload is Telegram's limit for files a bot uploads.
const maxUpload = 50 << 20

// Open starts an answer in target's chat (and topic). In groups the answer quotes the
// user's message (target.ReplyToID).
func (c *Channel) Open(ctx context.Context, t channels.Target) (channels.Stream, error) {
	if !c.life.Running() {
		return nil, errors.New("telegram: the channel is not running")
	}
	chat, thread, err := parseTarget(t)
	if err != nil {
		return nil, err
	}
	s := &stream{c: c, chat: chat, thread: thread}
	if t.ChatType == channels.ChatGroup && t.ReplyToID != "" {
		s.replyTo, _ = strconv.Atoi(t.ReplyToID)
	}
	s.placed, s.placement = t.Placed, t.Resume
	// The placement: the answer's messages, then after a ';' those of its parts.
	text, parts, _ := strings.Cut(t.Resume, ";")
	for f := range strings.SplitSeq(text, ",") {
		if id, err := strconv.Atoi(f); err == nil {
			s.sent = append(s.sent, sentMsg{id: id, old: true})
		}
	}
	for f := range strings.SplitSeq(parts, ",") {
		if id, err := strconv.Atoi(f); err == nil {
			s.oldParts = append(s.oldParts, id)
		}
	}
	return s, nil
}

// CheckTarget refuses a chat or topic id Telegram cannot have (channels.TargetChecker).
func (c *Channel) CheckTarget(t channels.Target) error {
	_, _, err := parseTarget(t)
	return err
}

// parseTarget reads target's chat id and topic id (0 for none), which Telegram numbers.
func parseTarget(t channels.Target) (chat int64, thread int, err error) {
	if chat, err = strconv.ParseInt(t.ChatID, 10, 64); err != nil {
		return 0, 0, channels.BadTarget(fmt.Errorf("telegram: %.64q is not a Telegram chat id (a number, like 123456789, or -1001234567890 for a group)", t.ChatID))
	}
	if t.ThreadID != "" {
		if thread, err = strconv.Atoi(t.ThreadID); err != nil {
			return 0, 0, channels.BadTarget(fmt.Errorf("telegram: %.64q is not a Telegram topic id (a number)", t.ThreadID))
		}
	}
	return chat, thread, nil
}

// stream renders one answer. Frames come from one goroutine, so it needs no lock.
type stream struct {
	c       *Channel
	chat    int64
	thread  int
	replyTo int

	text       strings.Builder // Markdown streamed so far
	sent       []sentMsg       // the answer's messages, in order
	lastFlush  time.Time
	stopTyping func()
	finished   bool

	renderedMD string   // the Markdown last rendered, usually the last preview's
	rendered   []string // its chunks

	// previewing is closed when the preview in flight ended; nil when none was started.
	// While it runs, the preview owns sent and the render cache, and reports placement.
	previewing chan struct{}

	placed    func(string) // told the ids of sent and of the parts when they change (channels.Target.Placed)
	placement string       // what it was last told

	partMsgs []int // the messages of the parts sent (message:send's text, voice, files)
	// oldParts are the parts' messages of an earlier attempt at this answer, cut by a
	// crash (Target.Resume): removed before this answer's parts, which take their place.
	oldParts []int
}

type sentMsg struct {
	id   int
	html string // the chunk it shows; "" for one of an earlier attempt, not yet edited
	old  bool   // posted by an earlier attempt at this answer, cut by a crash (Target.Resume)
}

// report tells placed the answer's messages, when they changed since the last time.
func (s *stream) report() {
	ids := make([]string, len(s.sent))
	for i, m := range s.sent {
		ids[i] = strconv.Itoa(m.id)
	}
	p := strings.Join(ids, ",")
	if parts := append(slices.Clone(s.oldParts), s.partMsgs...); len(parts) > 0 {
		pids := make([]string, len(parts))
		for i, id := range parts {
			pids[i] = strconv.Itoa(id)
		}
		p += ";" + strings.Join(pids, ",")
	}
	if p != s.placement && s.placed != nil {
		s.placement = p
		s.placed(p)
	}
}

// leaveAside drops the i-th message, one of an earlier attempt that can no longer be
// edited (deleted, or too old): the answer goes on without it, in new messages if need be.
func (s *stream) leaveAside(i int, err error) {
	s.c.log.Info("telegram: a message of the answer cut by the restart cannot be edited; the answer goes on without it",
		"chat", s.chat, "message", s.sent[i].id, "err", err)
	s.sent = slices.Delete(s.sent, i, i+1)
	s.report()
}

// errGone is edit's error for a message of an earlier attempt that isGone.
var errGone = errors.New("telegram: the message is gone")

// errMoved is edit's error when the chat turned out to have a new id (moved): the answer's
// messages so far are in the old chat, and it is posted anew in the new one.
var errMoved = errors.New("telegram: the chat has a new id")

// moved reports whether err is Telegram refusing a call because the group was upgraded to
// a supergroup: the answer then goes on in the new chat, from its start (what was posted
// stays in the old group, which nobody writes in any more), and the gateway is told, so
// that the conversation follows the chat.
func (s *stream) moved(ctx context.Context, err error) bool {
	to := migratedTo(err)
	if to == 0 || to == s.chat {
		return false
	}
	old := s.chat
	s.c.log.Warn("telegram: the group was upgraded to a supergroup; the answer goes to its new id", "old_chat", old, "new_chat", to)
	// A message id of the old group names nothing in the new one: no quote, no edits.
	s.chat, s.thread, s.replyTo = to, 0, 0
	s.sent, s.oldParts = nil, nil
	s.renderedMD, s.rendered = "", nil
	s.report()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := s.c.chatMoved(ctx, old, to); err != nil {
		s.c.log.Warn("telegram: the gateway did not take the news of the new chat id; the next send to the old one tells it again", "old_chat", old, "err", err)
	}
	return true
}

// Send shows one frame of the answer. Each frame's work is a method of its own: the
// answer's final send waits for its send slot (seconds when many answers are due at once)
// under these frames, and a collection shrinks the stack of a goroutine that waits using
// less than a quarter of it (3.3 KB of 16): the model's chunk decoding may have doubled
// the turn's stack before.
func (s *stream) Send(ctx context.Context, f channels.Frame) error {
	if s.finished {
		return errors.New("telegram: this answer is already finished")
	}
	switch f.Type {
	case channels.FrameStart:
		s.startTyping()
		return nil
	case channels.FrameDelta:
		s.delta(ctx, f.Text)
		return nil
	case channels.FrameTool, channels.FrameStatus:
		// The typing indicator already says work is going on.
		return nil
	}
	// What follows goes after the preview in flight, and uses what it sent.
	s.waitPreview()
	switch f.Type {
	case channels.FrameParts:
		return s.parts(ctx, f.Parts)
	case channels.FrameDone:
		return s.done(ctx, f.Text)
	case channels.FrameError:
		return s.fail(ctx, f.Text)
	}
	return nil
}

// delta adds streamed text, and shows it when the last preview is old enough and ended.
func (s *stream) delta(ctx context.Context, text string) {
	s.text.WriteString(text)
	if time.Since(s.lastFlush) >= s.c.opts.EditInterval && !s.previewRunning() {
		s.startPreview(ctx)
	}
}

// parts sends the text so far, then the parts: a voice note follows the words it speaks.
func (s *stream) parts(ctx context.Context, parts []channels.Part) error {
	s.dropOldParts(ctx)
	if s.text.Len() > 0 {
		if err := s.sync(ctx, s.text.String()); err != nil {
			return err
		}
	}
	for _, p := range parts {
		if err := s.sendPart(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// done shows the final text (what streamed when text is empty).
func (s *stream) done(ctx context.Context, text string) error {
	s.finish()
	s.dropOldParts(ctx)
	if text == "" {
		text = s.text.String()
	}
	return s.sync(ctx, text)
}

// dropOldParts deletes the parts an earlier attempt at this answer sent before a crash cut
// it: this answer sends its own, and the chat shows each once. A part that cannot be
// deleted is logged and left.
func (s *stream) dropOldParts(ctx context.Context) {
	for len(s.oldParts) > 0 {
		id := s.oldParts[0]
		to, key := s.c.to(s.chat, 30*time.Second)
		err := to.Do(ctx, key, func(ctx context.Context) error {
			return s.c.deleteMessage(ctx, &bot.DeleteMessageParams{ChatID: s.chat, MessageID: id})
		})
		if err != nil && !isGone(err) {
			s.c.log.Warn("telegram: a part of the answer cut by the restart could not be removed", "chat", s.chat, "message", id, "err", err)
		}
		s.oldParts = s.oldParts[1:]
		s.report()
	}
}

// fail ends the answer with an error notice.
func (s *stream) fail(ctx context.Context, text string) error {
	s.finish()
	if text == "" {
		text = "Sorry, something went wrong with this answer."
	}
	return s.sendPlain(ctx, text)
}

func (s *stream) finish() {
	s.finished = true
	if s.stopTyping != nil {
		s.stopTyping()
	}
}

// startTyping shows "typing…" now and every TypingInterval until the answer ends, the
// channel stops, or maxTyping passes.
func (s *stream) startTyping() {
	if s.stopTyping != nil {
		return
	}
	// Stop waits for the indicator as for any goroutine of the channel: it holds one Enter
	// from here until its last action ended.
	life, ok := s.c.life.Enter()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(life, maxTyping)
	t := &typingTimer{c: s.c, chat: s.chat, thread: s.thread, ctx: ctx,
		first: make(chan struct{}), done: make(chan struct{}), sending: true}
	context.AfterFunc(ctx, t.end)
	// The first signal goes out at once, while the model works: sending it before Start
	// returned held every answer back by a round trip to Telegram.
	go t.send()
	// The answer waits for the first signal, so even an instant answer shows it; waiting
	// for the last action means none lands after the answer.
	s.stopTyping = func() {
		select {
		case <-t.first:
		case <-t.done:
		}
		cancel()
		<-t.done
	}
}

// typingTimer refreshes the typing indicator of one answer from a timer rather than from a
// goroutine parked for the whole turn: a goroutine that sent a request keeps the stack that
// took (several KB) for as long as it waits, and every in-flight turn had one.
type typingTimer struct {
	c      *Channel
	chat   int64
	thread int
	ctx    context.Context // ends with the answer, the channel or maxTyping

	first chan struct{} // closed once the first action was tried
	done  chan struct{} // closed once ctx ended and no action runs

	mu      sync.Mutex
	sending bool        // an action runs (from start or from the timer)
	timer   *time.Timer // the next refresh; nil while sending
	ended   bool
}

// send tries one typing action, then arms the next one unless ctx ended meanwhile or the
// bot cannot reach the chat (refreshing would only be refused again).
func (t *typingTimer) send() {
	var err error
	if t.ctx.Err() == nil {
		err = t.c.typing(t.ctx, t.chat, t.thread)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-t.first:
	default:
		close(t.first)
	}
	t.sending = false
	if t.ctx.Err() != nil || errors.Is(err, channels.ErrNoChat) {
		t.finish()
		return
	}
	t.timer = time.AfterFunc(t.c.opts.TypingInterval, t.fire)
}

// fire is the timer's: the next action, unless ctx ended since it was armed.
func (t *typingTimer) fire() {
	t.mu.Lock()
	if t.ctx.Err() != nil {
		t.finish()
		t.mu.Unlock()
		return
	}
	t.sending, t.timer = true, nil
	t.mu.Unlock()
	t.send()
}

// end runs once ctx ended: a pending refresh is dropped; a running action finishes
// itself (send sees ctx ended).
func (t *typingTimer) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sending {
		return
	}
	if t.timer != nil && !t.timer.Stop() {
		return // fired already: fire sees ctx ended and finishes
	}
	t.finish()
}

// finish closes done and leaves the lifecycle, once; t.mu is held.
func (t *typingTimer) finish() {
	if t.ended {
		return
	}
	t.ended = true
	close(t.done)
	t.c.life.Leave()
}

// typing sends one typing action. It is a hint: it takes a send slot only when the bot
// has one free, never a chat's (it would hold the next message of the chat back), is
// skipped while a 429 holds the chat, and its failures are only logged; the error is
// returned for the refreshes to tell a chat the bot cannot reach.
func (c *Channel) typing(ctx context.Context, chat int64, thread int) error {
	to, key := c.to(chat, 10*time.Second)
	err := to.Try(ctx, key, false, func(ctx context.Context) error {
		err := c.sendChatAction(ctx, &bot.SendChatActionParams{ChatID: chat, MessageThreadID: thread, Action: models.ChatActionTyping})
		return err
	})
	if err != nil && !errors.Is(err, channels.ErrSkipped) && ctx.Err() == nil {
		c.log.Debug("telegram: typing indicator failed", "chat", chat, "err", err)
	}
	return err
}

// render turns the answer's Markdown into the HTML of each message.
func render(md string) []string {
	return markdown.SplitTelegramHTML(markdown.TelegramHTML(md), MaxText)
}

// renderOnce is render with a one-entry cache: the final text is most often exactly what
// the last preview showed, and rendering costs a Markdown parse.
func (s *stream) renderOnce(md string) []string {
	if md != s.renderedMD || s.rendered == nil {
		s.renderedMD, s.rendered = md, render(md)
	}
	return s.rendered
}

// startPreview shows the text so far from a goroutine of its own, which ends with the
// preview: the Markdown render and the Telegram call take the stack deeper than the 8 KB
// of a turn waiting on the model, and run on the turn's goroutine (inside the model's read
// loop) they doubled its stack to 16 KB, kept while the answer then waited for its send
// slot. A delta that comes while a preview runs only adds to the text (the next preview or
// the final sync shows it); any other frame waits for the preview first.
func (s *stream) startPreview(ctx context.Context) {
	s.lastFlush = time.Now()
	// Stop waits for the preview as for any goroutine of the channel, and cuts it short.
	life, ok := s.c.life.Enter()
	if !ok {
		return
	}
	done := make(chan struct{})
	s.previewing = done
	md := s.text.String() // later deltas append past it: this string stays as it is
	go func() {
		defer close(done)
		defer s.c.life.Leave()
		ctx, cancel := context.WithCancel(ctx)
		defer context.AfterFunc(life, cancel)()
		defer cancel()
		s.preview(ctx, md)
	}()
}

// previewRunning reports whether a preview started and has not ended yet.
func (s *stream) previewRunning() bool {
	if s.previewing == nil {
		return false
	}
	select {
	case <-s.previewing:
		return false
	default:
		return true
	}
}

// waitPreview waits for the preview in flight, if any, to end.
func (s *stream) waitPreview() {
	if s.previewing != nil {
		<-s.previewing
	}
}

// preview shows md with at most one call, and only when a send slot is free now and no
// 429 holds the chat: a streaming preview never holds up the answer, and the final sync
// fixes any gap.
func (s *stream) preview(ctx context.Context, md string) {
	chunks := s.renderOnce(md)
	i := 0
	for i < len(chunks) && i < len(s.sent) && s.sent[i].html == chunks[i] {
		i++
	}
	if i == len(chunks) {
		return
	}
	to, key := s.c.to(s.chat, 15*time.Second)
	err := to.Try(ctx, key, true, func(ctx context.Context) error {
		if i < len(s.sent) {
			err := s.c.editMessageText(ctx, &bot.EditMessageTextParams{ChatID: s.chat, MessageID: s.sent[i].id, Text: chunks[i], ParseMode: models.ParseModeHTML})
			if err == nil || isNotModified(err) {
				s.sent[i].html = chunks[i]
				return nil
			}
			return err
		}
		id, err := s.c.sendMessage(ctx, s.messageParams(chunks[i], true))
		if err == nil {
			s.sent = append(s.sent, sentMsg{id: id, html: chunks[i]})
			s.report()
		}
		return err
	})
	if i < len(s.sent) && s.sent[i].old && isGone(err) {
		s.leaveAside(i, err)
		return
	}
	if s.moved(ctx, err) {
		return // the next preview, or the final text, posts the answer in the new chat
	}
	// A failed preview is only logged; a 429 has held the chat, so the final text waits
	// out its retry_after too.
	if err != nil && !errors.Is(err, channels.ErrSkipped) {
		s.c.log.Debug("telegram: streaming preview skipped", "chat", s.chat, "err", err)
	}
}

// sync makes the answer's messages show md in full: edits where a message differs, new
// messages for the rest. Each call is paced and retried; Telegram refusing the HTML
// sends that piece as plain text instead.
func (s *stream) sync(ctx context.Context, md string) error {
	chunks := s.renderOnce(md)
	for i := 0; i < len(chunks); i++ {
		chunk := chunks[i]
		if i < len(s.sent) {
			if s.sent[i].html == chunk {
				continue
			}
			err := s.edit(ctx, i, chunk)
			if errors.Is(err, errGone) {
				i-- // the next message of the earlier attempt, or a new one, takes its place
				continue
			}
			if errors.Is(err, errMoved) {
				i = -1 // the whole answer, in the new chat
				continue
			}
			if err != nil {
				return err
			}
			continue
		}
		if err := s.sendNew(ctx, chunk); err != nil {
			return err
		}
	}
	// The final text can be shorter than what streamed (the agent revised it): messages
	// beyond it would show stale text.
	for len(s.sent) > len(chunks) && len(chunks) > 0 {
		last := s.sent[len(s.sent)-1]
		to, key := s.c.to(s.chat, 30*time.Second)
		err := to.Do(ctx, key, func(ctx context.Context) error {
			err := s.c.deleteMessage(ctx, &bot.DeleteMessageParams{ChatID: s.chat, MessageID: last.id})
			return err
		})
		if err != nil && !(last.old && isGone(err)) {
			return fmt.Errorf("telegram: removing a stale part of the answer in chat %d: %w", s.chat, err)
		}
		s.sent = s.sent[:len(s.sent)-1]
		s.report()
	}
	return nil
}

func (s *stream) edit(ctx context.Context, i int, chunk string) error {
	to, key := s.c.to(s.chat, 30*time.Second)
	try := func(text string, mode models.ParseMode) error {
		err := to.Do(ctx, key, func(ctx context.Context) error {
			err := s.c.editMessageText(ctx, &bot.EditMessageTextParams{ChatID: s.chat, MessageID: s.sent[i].id, Text: text, ParseMode: mode})
			return err
		})
		if isNotModified(err) {
			return nil
		}
		return err
	}
	err := try(chunk, models.ParseModeHTML)
	if isParseError(err) {
		s.c.log.Warn("telegram: Telegram refused the HTML of an answer; sending it as plain text", "chat", s.chat, "err", err)
		err = try(markdown.TelegramPlain(chunk, MaxText), "")
	}
	if s.sent[i].old && isGone(err) {
		s.leaveAside(i, err)
		return errGone
	}
	if s.moved(ctx, err) {
		return errMoved
	}
	if err != nil {
		return fmt.Errorf("telegram: editing the answer in chat %d: %w", s.chat, err)
	}
	s.sent[i].html = chunk
	return nil
}

// sendNew posts the answer's next chunk, which the answer's later syncs edit.
func (s *stream) sendNew(ctx context.Context, chunk string) error {
	id, err := s.postChunk(ctx, chunk)
	if err != nil {
		return err
	}
	s.sent = append(s.sent, sentMsg{id: id, html: chunk})
	s.report()
	return nil
}

// postChunk posts one chunk of HTML, as plain text when Telegram refuses its HTML.
func (s *stream) postChunk(ctx context.Context, chunk string) (int, error) {
	id, err := s.post(ctx, s.messageParams(chunk, true))
	if s.moved(ctx, err) {
		id, err = s.post(ctx, s.messageParams(chunk, true))
	}
	if isParseError(err) {
		id, err = s.postPlain(ctx, chunk, err)
	}
	if err != nil {
		return 0, fmt.Errorf("telegram: sending the answer to chat %d: %w", s.chat, err)
	}
	return id, nil
}

// post sends one new message of the answer, paced and retried.
func (s *stream) post(ctx context.Context, p *bot.SendMessageParams) (id int, err error) {
	to, key := s.c.to(s.chat, 30*time.Second)
	err = to.Do(ctx, key, func(ctx context.Context) (err error) {
		id, err = s.c.sendMessage(ctx, p)
		return err
	})
	return id, err
}

// postPlain sends a chunk whose HTML Telegram refused as plain text instead.
func (s *stream) postPlain(ctx context.Context, chunk string, refused error) (int, error) {
	s.c.log.Warn("telegram: Telegram refused the HTML of an answer; sending it as plain text", "chat", s.chat, "err", refused)
	return s.post(ctx, s.messageParams(markdown.TelegramPlain(chunk, MaxText), false))
}

// messageParams builds a new message of the answer; its first message quotes the user in groups.
func (s *stream) messageParams(text string, html bool) *bot.SendMessageParams {
	p := &bot.SendMessageParams{ChatID: s.chat, MessageThreadID: s.thread, Text: text}
	if html {
		p.ParseMode = models.ParseModeHTML
	}
	if s.replyTo != 0 && len(s.sent) == 0 {
		p.ReplyParameters = &models.ReplyParameters{MessageID: s.replyTo, AllowSendingWithoutReply: true}
	}
	return p
}

// sendPlain sends text as it is (error notices), split at the limit.
func (s *stream) sendPlain(ctx context.Context, text string) error {
	to, key := s.c.to(s.chat, 30*time.Second)
	for _, chunk := range markdown.SplitTelegramHTML(markdown.EscapeHTML(text), MaxText) {
		plain := markdown.TelegramText(chunk)
		send := func(ctx context.Context) error {
			_, err := s.c.sendMessage(ctx, s.messageParams(plain, false))
			return err
		}
		err := to.Do(ctx, key, send)
		if s.moved(ctx, err) {
			to, key = s.c.to(s.chat, 30*time.Second)
			err = to.Do(ctx, key, send)
		}
		if err != nil {
			return fmt.Errorf("telegram: sending a notice to chat %d: %w", s.chat, err)
		}
	}
	return nil
}

// sendPart delivers one extra part: audio as a native voice note (Ogg/Opus, converted when
// needed; a file when the user refuses voice notes) or an audio file, images as photos,
// other files as documents, text as a message.
func (s *stream) sendPart(ctx context.Context, p channels.Part) error {
	if p.Type == channels.PartText {
		if strings.TrimSpace(p.Text) == "" {
			return nil
		}
		// A message of its own, not one of the answer's: the answer's final text would
		// edit it, or delete it as a chunk it no longer needs.
		for _, chunk := range render(p.Text) {
			id, err := s.postChunk(ctx, chunk)
			if err != nil {
				return err
			}
			s.partSent(id)
		}
		return nil
	}
	data, err := partData(p)
	if err != nil {
		return err
	}
	name := p.Name
	if name == "" && p.Path != "" {
		name = filepath.Base(p.Path)
	}
	mt, _, _ := mime.ParseMediaType(p.MIME)
	method := "document"
	switch {
	case p.Type == channels.PartAudio && (p.Voice || mt == "audio/ogg"):
		method, name = "voice", "voice.ogg"
		if mt != "audio/ogg" && !audio.IsOggOpus(data) {
			if data, err = s.c.toOggOpus(ctx, data); err != nil {
				return err
			}
		}
	case p.Type == channels.PartAudio:
		method = "audio"
	case p.Type == channels.PartImage:
		method = "photo"
	}
	if name == "" {
		name = "file"
	}
	reply := s.messageParams("", false).ReplyParameters
	secs := int(p.Duration + 0.5)
	var call string
	var params any // the SDK's, its file left nil: callMultipart puts the file in its place
	switch method {
	case "voice":
		call, params = "sendVoice", &bot.SendVoiceParams{ChatID: s.chat, MessageThreadID: s.thread, Duration: secs, ReplyParameters: reply}
	case "audio":
		call, params = "sendAudio", &bot.SendAudioParams{ChatID: s.chat, MessageThreadID: s.thread, Duration: secs, ReplyParameters: reply}
	case "photo":
		call, params = "sendPhoto", &bot.SendPhotoParams{ChatID: s.chat, MessageThreadID: s.thread, ReplyParameters: reply}
	default:
		call, params = "sendDocument", &bot.SendDocumentParams{ChatID: s.chat, MessageThreadID: s.thread, ReplyParameters: reply}
	}
	id, err := s.upload(ctx, call, params, method, name, data)
	if s.moved(ctx, err) {
		return s.sendPart(ctx, p) // its parameters anew, for the new chat
	}
	if method == "voice" && isVoiceForbidden(err) {
		// The user's privacy settings refuse voice notes: an expected refusal, not a
		// failed delivery. The same sound as a file is still theirs to play.
		s.c.log.Info("telegram: the user does not accept voice notes; sending the audio as a file", "chat", s.chat)
		method = "document"
		id, err = s.upload(ctx, "sendDocument", &bot.SendDocumentParams{ChatID: s.chat, MessageThreadID: s.thread, ReplyParameters: reply}, method, name, data)
	}
	if err != nil {
		return fmt.Errorf("telegram: sending a %s to chat %d: %w", method, s.chat, err)
	}
	s.partSent(id)
	return nil
}

// partSent keeps the message of a part sent, so that an answer cut by a crash after it
// replaces it rather than sending it a second time.
func (s *stream) partSent(id int) {
	if id != 0 {
		s.partMsgs = append(s.partMsgs, id)
		s.report()
	}
}

// upload makes one media call with data as its file field, paced and retried, and
// returns the message it made.
func (s *stream) upload(ctx context.Context, call string, params any, field, name string, data []byte) (int, error) {
	to, key := s.c.to(s.chat, 2*time.Minute)
	var sent struct {
		ID int `json:"message_id"`
	}
	err := to.Do(ctx, key, func(ctx context.Context) error {
		// Not the SDK's upload: it decodes the answer into a whole models.Message.
		return s.c.callMultipart(ctx, call, params, field, name, data, &sent)
	})
	return sent.ID, err
}

// partData reads a media part, refusing what Telegram would refuse anyway.
func partData(p channels.Part) ([]byte, error) {
	b, err := channels.ReadPart(p, maxUpload)
	if errors.Is(err, channels.ErrTooLarge) {
		return nil, fmt.Errorf("telegram: %w: Telegram takes uploads of up to 50 MB", err)
	}
	if err != nil {
		return nil, fmt.Errorf("telegram: %w", err)
	}
	return b, nil
}

// toOggOpus converts audio to Telegram's voice-note format with ffmpeg.
func (c *Channel) toOggOpus(ctx context.Context, data []byte) ([]byte, error) {
	dir, err := os.MkdirTemp(c.mediaDir, ".voice-*")
	if err != nil {
		return nil, fmt.Errorf("telegram: converting a voice note: %w", err)
	}
	defer os.RemoveAll(dir)
	in, out := filepath.Join(dir, "in"), filepath.Join(dir, "out.ogg")
	if err := os.WriteFile(in, data, 0o600); err != nil {
		return nil, fmt.Errorf("telegram: converting a voice note: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := audio.ToOggOpus(ctx, in, out); err != nil {
		return nil, fmt.Errorf("telegram: converting a voice note to Ogg/Opus: %w", err)
	}
	return os.ReadFile(out)
}
