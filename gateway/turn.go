package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"time"

	"gateway/channels"
	"gateway/harness"
	"gateway/hooks"
	"gateway/internal/llm"
	"gateway/internal/pace"
)

type cancelled struct{ reason string }

func (c *cancelled) Error() string { return "turn cancelled: " + c.reason }

func errCancelled(reason string) error { return &cancelled{reason: reason} }

// errShutdown cuts the turns still running when Stop's deadline passes.
var errShutdown = errCancelled("the gateway is shutting down")

// runTurn runs one turn and delivers its frames: start, deltas/tools/status, the parts of
// message:send, then done (or error). done is sent only after everything reached the chat.
//
// undelivered tells that the answer's last frame could not reach the chat for a reason that
// may pass (the platform's 5xx, the network, a rate limit outlasting the retries): its
// message then stays journaled, to be answered after a restart rather than lost.
func (s *session) runTurn(ctx context.Context, req *turnReq, rt *Runtime, agent *harness.Session, openErr error) (undelivered bool) {
	g := s.g
	started := time.Now()
	ctx, cancel := context.WithTimeout(ctx, g.cfg.TurnTimeout)
	defer cancel()

	if g.metrics != nil {
		g.metrics.RunningTurns.Inc()
		defer g.metrics.RunningTurns.Dec()
	}
	// Streaming shares the turn's deadline but not its cancel, so /stop never cuts a send
	// halfway; what ends the turn gets a fresh budget (settle).
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.TurnTimeout)
	defer dcancel()
	d := s.openDelivery(dctx, req, rt, openErr)
	if d == nil {
		return false
	}

	if !s.admit(ctx, d) {
		return d.gaveUp
	}
	defer func() { <-g.turnSem }()

	if !s.beforeRun(ctx, d, req, agent) {
		return d.gaveUp
	}
	res, err := agent.RunAttempt(ctx, req.asked, req.prompt, req.parts, d.update)
	defer d.settle()()
	s.answer(ctx, d, req, rt, agent, res, err, started)
	return d.gaveUp
}

// admit waits for a place under the global bound on concurrent turns; false when the
// turn ended first (told as cancelled).
func (s *session) admit(ctx context.Context, d *deliverer) bool {
	select {
	case s.g.turnSem <- struct{}{}:
		return true
	case <-ctx.Done():
		defer d.settle()()
		d.finishCancelled(ctx, "")
		return false
	}
}

// openDelivery opens the answer's stream in the chat and sends its start; nil when the
// turn ends there (no such channel, the stream did not open, the session did not). The
// steps of a turn are functions of their own so that runTurn's frame, which stays under
// the whole model call, is small (see TestWaitingTurnHoldsASmallStack in harness).
func (s *session) openDelivery(dctx context.Context, req *turnReq, rt *Runtime, openErr error) *deliverer {
	g := s.g
	ch := g.byName[req.target.Channel]
	if ch == nil {
		g.log.Error("no channel for answer", "channel", req.target.Channel)
		return nil
	}
	target := req.target
	target.Placed = g.placed(s.key, req)
	st, err := ch.Open(dctx, target)
	if err != nil {
		g.deliveryFailed(rt.Bus, req.info, err)
		return nil
	}
	d := &deliverer{g: g, st: st, bus: rt.Bus, info: req.info, ctx: dctx}
	d.send(channels.Frame{Type: channels.FrameStart})

	if openErr != nil {
		d.failOpen(s.key, openErr)
		return nil
	}
	return d
}

// historyError is a chat's history that could not be opened (read, or its torn end
// repaired): the gateway's files, not the chat's doing.
type historyError struct{ err error }

func (e *historyError) Error() string { return e.err.Error() }
func (e *historyError) Unwrap() error { return e.err }

// failOpen ends a turn whose session could not be opened, told in plain words (openFailed).
func (d *deliverer) failOpen(key string, err error) {
	d.fail("turn", d.g.openFailed(key, err), err)
}

// openFailed logs why a chat's session could not be opened and returns what the chat is
// told. A history the gateway cannot read, and a profile's model or tools that cannot be
// set up, are the admin's to mend: their errors name the server's paths and config keys,
// which the log (and gateway:error) carry, not the chat.
func (g *Gateway) openFailed(key string, err error) string {
	log := []any{"session", key, "err", err}
	if errors.Is(err, fs.ErrPermission) {
		log = append(log, "hint", fmt.Sprintf("the gateway runs as user %d, which must be able to read and write state_dir and every file in it", os.Geteuid()))
	}
	g.log.Error("cannot open the chat session", log...)
	var he *historyError
	if errors.As(err, &he) {
		return "Sorry, I can't open this chat's conversation history, so I can't answer right now. The gateway's log tells its admin why."
	}
	return "Sorry, I can't answer in this chat right now: my setup for it has a problem only the admin can fix. The gateway's log tells them what."
}

// beforeRun readies the agent for the turn's prompt; false when the turn was a /compact
// or a hook's command that ended without a prompt (both answered there).
func (s *session) beforeRun(ctx context.Context, d *deliverer, req *turnReq, agent *harness.Session) bool {
	agent.SetInfo(req.info) // the speaker may differ from the session's last one (groups)
	if req.compact {
		s.compactTurn(ctx, d, req, agent)
		return false
	}
	if req.hookCmd != nil {
		if req.prompt = s.commandTurn(ctx, d, req, agent); req.prompt == "" {
			return false
		}
	}
	return true
}

// update shows one of the agent's updates in the chat.
func (d *deliverer) update(u harness.Update) {
	switch u.Kind {
	case harness.UpdateDelta:
		d.send(channels.Frame{Type: channels.FrameDelta, Text: u.Text})
	case harness.UpdateToolStart:
		d.send(channels.Frame{Type: channels.FrameTool, Tool: &channels.ToolInfo{ID: u.ToolID, Name: u.ToolName, Phase: "start"}})
	case harness.UpdateToolEnd:
		d.send(channels.Frame{Type: channels.FrameTool, Tool: &channels.ToolInfo{ID: u.ToolID, Name: u.ToolName, Phase: "end", IsError: u.IsError, Summary: u.Text}})
	case harness.UpdateStatus:
		d.send(channels.Frame{Type: channels.FrameStatus, Text: u.Text})
	}
}

// answer ends a turn the agent ran: cancelled, failed, or answered through message:send
// and done.
func (s *session) answer(ctx context.Context, d *deliverer, req *turnReq, rt *Runtime, agent *harness.Session, res harness.Result, err error, started time.Time) {
	g := s.g
	switch {
	case res.Aborted || (err != nil && ctx.Err() != nil):
		d.finishCancelled(ctx, res.Text)
		return
	case err != nil:
		if g.metrics != nil {
			g.metrics.ProviderErrors.WithLabelValues(agent.Stats().Provider).Inc()
		}
		text, admin := userText(err)
		if admin {
			g.log.Error("turn failed on the gateway's model settings, which only the admin can mend; the chat was told so in plain words", "session", s.key, "err", err)
		} else {
			g.log.Warn("turn failed", "session", s.key, "err", err)
		}
		if strings.TrimSpace(res.Text) != "" {
			// Part of the answer was shown (a stream cut midway): it stays, whole, as the
			// model keeps it, and the failure is told below it. An error frame would leave
			// the chat's last preview (Telegram, Discord, Slack) or replace the words (web).
			d.bus.Emit(d.ctx, &hooks.GatewayError{Session: d.info, Stage: "turn", Error: err.Error()})
			d.done(res.Text + "\n\n(" + text + ")")
			return
		}
		d.fail("turn", text, err)
		return
	}

	if res.Ended == harness.EndedAtLength {
		s.lengthReached(rt, req)
	}
	// message:send runs after the turn settled and before done; its parts go first.
	parts := s.messageSend(d, req, rt, res.Text)
	if len(parts) > 0 {
		d.send(channels.Frame{Type: channels.FrameParts, Parts: parts})
	}
	d.done(withNote(res.Text, endNote(res.Text, res.Ended), len(parts) > 0))
	if d.err == nil {
		if g.metrics != nil {
			g.metrics.MessagesOut.WithLabelValues(req.target.Channel).Inc()
			g.metrics.TurnSeconds.Observe(time.Since(started).Seconds())
		}
	}
}

// adminFaultText is what the chat is told when the model fails for a reason only the admin
// can mend (see harness.ProviderError.AdminFault); noModelText when that reason is that
// no model is configured at all.
const (
	adminFaultText = "Sorry, I can't reach my model right now. The admin has been told; please try again later."
	noModelText    = "I am not set up to answer yet: the admin has not chosen a model."
)

// userText is what the chat is told of a failed model call: the error's own words, written
// for the chat, unless only the admin can mend it (admin): those words name config keys
// (llm.api_key, llm.model), which are the log's to tell, not a chat user's.
func userText(err error) (text string, admin bool) {
	var pe *harness.ProviderError
	switch {
	case errors.As(err, &pe) && pe.NoModel:
		return noModelText, true
	case pe != nil && pe.AdminFault():
		return adminFaultText, true
	}
	return err.Error(), false
}

// lengthReached tells the admin, by its key, of the limit that cut an answer: the chat is
// told only that the answer reached the length limit (endNote).
func (s *session) lengthReached(rt *Runtime, req *turnReq) {
	limit := "the provider's default"
	if n := mergeLLM(rt.LLM, req.profile.LLM).WithDefaults().MaxTokens; n > 0 {
		limit = fmt.Sprintf("%d tokens", n)
	}
	s.g.log.Warn("an answer reached the length limit of one answer (llm.max_tokens); raise it if answers are often cut",
		"session", s.key, "profile", req.profile.Name, "max_tokens", limit)
}

// endNote tells the chat why an answer ends as it does (harness.Result.Ended); "" when
// it is whole. In plain words: the setting behind a limit is the admin's (lengthReached).
func endNote(text string, e harness.Ending) string {
	switch e {
	case harness.EndedAtLength:
		if strings.TrimSpace(text) == "" {
			return "The model reached the length limit of one answer before writing anything. Please try again, or ask for less at once."
		}
		return "The answer stops here: it reached the length limit of one answer. Ask me to go on."
	case harness.EndedWithheld:
		return "The model's provider withheld this answer (its content filter)."
	case harness.EndedEmpty:
		return "The model gave an empty answer. Please try again, or ask differently."
	}
	return ""
}

// withNote is the answer's text with the note that says why it ends as it does below it
// (endNote). An empty answer is the note alone, unless message:send gave it
// parts (a hook's reply): the chat then has something, and an empty text is fine.
func withNote(text, note string, parts bool) string {
	switch {
	case note == "", strings.TrimSpace(text) == "" && parts:
		return text
	case strings.TrimSpace(text) == "":
		return note
	}
	return text + "\n\n(" + note + ")"
}

// messageSend runs the message:send hooks and returns the parts they add. A function of
// its own, as are done and the frames' error paths, so that the frames under the answer's
// final send stay small: it waits there for the chat's send slot (seconds when many answers
// are due at once), and a collection shrinks a stack that waits using less than a quarter
// of it (3.3 KB of 16).
func (s *session) messageSend(d *deliverer, req *turnReq, rt *Runtime, text string) []channels.Part {
	return rt.Bus.Send(d.ctx, &hooks.MessageSend{
		Session: req.info, InputText: req.prompt, ResponseText: text, IsVoice: req.isVoice,
		TTSMode: s.voiceChoice(req.profile), Voice: req.profile.TTSVoice, Language: req.profile.TTSLanguage,
	})
}

// deliverer sends a turn's frames in order and remembers the first delivery failure; after
// one, only the final done/error is still attempted. Its events go to the bus of the runtime
// the turn started with, which a reload may have replaced meanwhile.
type deliverer struct {
	g    *Gateway
	st   channels.Stream
	bus  *hooks.Bus
	info hooks.Session
	ctx  context.Context
	err  error
	// gaveUp is set when a final frame failed after its retries on a failure that may
	// pass (pace.ErrGaveUp).
	gaveUp bool
}

// settleBudget is the least time the end of a turn gets to reach the chat.
const settleBudget = 2 * time.Minute

// settle gives the end of the turn (message:send, its parts, done or error, the events) a
// budget of its own: a turn cut by turn_timeout has used all of the turn's, and its user
// must still be told. It returns the func that releases the budget.
func (d *deliverer) settle() (release func()) {
	var cancel context.CancelFunc
	d.ctx, cancel = context.WithTimeout(context.WithoutCancel(d.ctx), max(d.g.cfg.TurnTimeout, settleBudget))
	return cancel
}

func (d *deliverer) send(f channels.Frame) {
	final := f.Type == channels.FrameDone || f.Type == channels.FrameError
	if d.err != nil && !final {
		return
	}
	if err := d.st.Send(d.ctx, f); err != nil {
		d.failed(f.Type, final, err)
	}
}

// done sends the done frame with the answer's text.
func (d *deliverer) done(text string) {
	if err := d.st.Send(d.ctx, channels.Frame{Type: channels.FrameDone, Text: text}); err != nil {
		d.failed(channels.FrameDone, true, err)
	}
}

// failed records a frame's delivery failure; only the first is reported, and a final
// frame's.
func (d *deliverer) failed(typ channels.FrameType, final bool, err error) {
	if d.err == nil || final {
		d.g.deliveryFailed(d.bus, d.info, fmt.Errorf("%s frame: %w", typ, err))
	}
	d.err = err
	if final && errors.Is(err, pace.ErrGaveUp) {
		d.gaveUp = true
	}
}

// fail ends the turn with an error frame the user can read and a gateway:error event. The
// event carries cause's own text when there is a cause (the admin's hooks read it, and it
// may name a config key the chat is not told of), else text.
func (d *deliverer) fail(stage, text string, cause error) {
	detail := text
	if cause != nil {
		detail = cause.Error()
	}
	d.bus.Emit(d.ctx, &hooks.GatewayError{Session: d.info, Stage: stage, Error: detail})
	d.send(channels.Frame{Type: channels.FrameError, Text: text})
}

// finishCancelled ends a stopped turn with message:cancel. A turn cut by turn_timeout is also
// a failure: gateway:error, and the user is told why the answer ends there. Otherwise (/stop,
// interrupt, /new, shutdown) the text said so far stays, and done closes the answer.
func (d *deliverer) finishCancelled(ctx context.Context, partial string) {
	cause := context.Cause(ctx)
	if errors.Is(cause, context.DeadlineExceeded) {
		limit := d.g.cfg.TurnTimeout
		d.bus.Emit(d.ctx, &hooks.MessageCancel{Session: d.info, Reason: fmt.Sprintf("the turn ran longer than turn_timeout (%s)", limit)})
		d.bus.Emit(d.ctx, &hooks.GatewayError{Session: d.info, Stage: "turn",
			Error: fmt.Sprintf("turn_timeout: the turn ran longer than %s and was stopped", limit)})
		d.send(channels.Frame{Type: channels.FrameError, Text: fmt.Sprintf(
			"Sorry, this answer took too long (more than %s), so I stopped it. Please try again, perhaps with a smaller request.", plainDuration(limit))})
		return
	}
	reason := "cancelled"
	var c *cancelled
	if errors.As(cause, &c) {
		reason = c.reason
	}
	d.bus.Emit(d.ctx, &hooks.MessageCancel{Session: d.info, Reason: reason})
	if errors.Is(cause, errShutdown) {
		// Unlike /stop or a newer message, nothing the user did explains the cut. A durable
		// gateway keeps the message and answers it in full after the restart: asking the
		// user to send it again would have it answered twice.
		kept := d.g.durable()
		if strings.TrimSpace(partial) == "" {
			text := "Sorry, I had to stop before answering because I'm restarting. Please send your message again in a minute."
			if kept {
				text = "I'm restarting, so I had to stop before answering. I'll answer your message when I'm back in a moment."
			}
			d.send(channels.Frame{Type: channels.FrameError, Text: text})
			return
		}
		if kept {
			partial += "\n\n(I had to stop here because I'm restarting. I'll answer this again in full when I'm back.)"
		} else {
			partial += "\n\n(I had to stop here because I'm restarting. Ask me to go on in a minute.)"
		}
	}
	d.send(channels.Frame{Type: channels.FrameDone, Text: partial})
}

// plainDuration says a limit the way a person would: "10 minutes", "90 seconds".
func plainDuration(d time.Duration) string {
	unit := func(n int64, one string) string {
		if n == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %ss", n, one)
	}
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return unit(int64(d/time.Hour), "hour")
	case d >= time.Minute && d%time.Minute == 0:
		return unit(int64(d/time.Minute), "minute")
	case d >= time.Second:
		return unit(int64(d.Round(time.Second)/time.Second), "second")
	}
	return d.String()
}

// buildPrompt turns a message into the text the model sees: group speakers are named,
// replies quoted, and audio that could not be transcribed is described rather than dropped.
// Images and documents go to the model beside the text (keepMedia).
func buildPrompt(msg *channels.Message, text string) string {
	var b strings.Builder
	if msg.ReplyTo != nil && msg.ReplyTo.Text != "" {
		quote := msg.ReplyTo.Text
		if r := []rune(quote); len(r) > 500 {
			quote = string(r[:500]) + "…"
		}
		fmt.Fprintf(&b, "[In reply to: %q]\n", quote)
	}
	for _, p := range msg.Parts {
		switch p.Type {
		case channels.PartText:
		case channels.PartAudio:
			fmt.Fprintf(&b, "[The user sent an audio file%s that could not be transcribed.]\n", describe(p))
		case channels.PartImage, channels.PartFile:
			if p.Path == "" {
				fmt.Fprintf(&b, "[The user sent a %s%s that could not be kept.]\n", p.Type, describe(p))
			}
		}
	}
	group := msg.ChatType == channels.ChatGroup && msg.UserName != ""
	switch {
	case text != "":
		if group {
			fmt.Fprintf(&b, "%s: ", msg.UserName)
		}
		b.WriteString(text)
	case group && hasMedia(msg):
		fmt.Fprintf(&b, "(sent by %s)", msg.UserName) // a picture without a caption still has a sender
	}
	return strings.TrimSpace(b.String())
}

// keepMedia gives the images and documents of a message to the model as parts of its
// conversation: kept under state_dir/media (the adapter's download is pruned sooner) and
// referenced by path from the history.
func (g *Gateway) keepMedia(msg *channels.Message) []llm.Part {
	var out []llm.Part
	for _, p := range msg.Parts {
		if (p.Type != channels.PartImage && p.Type != channels.PartFile) || p.Path == "" {
			continue
		}
		path := p.Path
		if g.media != nil {
			kept, err := g.media.Keep(p.Path, p.Name)
			if err != nil {
				g.log.Warn("a file the user sent could not be kept under state_dir/media; using the download", "err", err)
			} else {
				path = kept
			}
		}
		typ, mimeType := llm.PartFile, p.MIME
		if p.Type == channels.PartImage {
			typ = llm.PartImage
		} else if sniffed := sniffImage(path, p.MIME); sniffed != "" {
			// A picture sent as a file without its type (application/octet-stream) is a picture.
			typ, mimeType = llm.PartImage, sniffed
		}
		out = append(out, llm.Part{Type: typ, MIME: mimeType, Path: path, Name: p.Name, Size: p.Size})
	}
	return out
}

// sniffImage returns the image type of a file whose platform gave no useful type, or "".
func sniffImage(path, mimeType string) string {
	if mimeType != "" && mimeType != "application/octet-stream" && mimeType != "binary/octet-stream" {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	head := make([]byte, 512)
	n, _ := io.ReadFull(f, head)
	switch t := http.DetectContentType(head[:n]); t {
	case "image/jpeg", "image/png", "image/gif", "image/webp":
		return t
	}
	return ""
}

func hasMedia(msg *channels.Message) bool {
	for _, p := range msg.Parts {
		if (p.Type == channels.PartImage || p.Type == channels.PartFile) && p.Path != "" {
			return true
		}
	}
	return false
}

func describe(p channels.Part) string {
	var bits []string
	if p.Name != "" {
		bits = append(bits, fmt.Sprintf("%q", p.Name))
	}
	if p.MIME != "" {
		bits = append(bits, p.MIME)
	}
	if p.Size > 0 {
		bits = append(bits, fmt.Sprintf("%d KB", (p.Size+1023)/1024))
	}
	if len(bits) == 0 {
		return ""
	}
	return " (" + strings.Join(bits, ", ") + ")"
}
