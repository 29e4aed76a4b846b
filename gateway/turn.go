package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"gateway/channels"
	"gateway/harness"
	"gateway/hooks"
)

type cancelled struct{ reason string }

func (c *cancelled) Error() string { return "turn cancelled: " + c.reason }

func errCancelled(reason string) error { return &cancelled{reason: reason} }

// runTurn runs one turn and delivers its frames: start, deltas/tools/status, the parts of
// message:send, then done (or error). done is sent only after everything reached the chat.
func (s *session) runTurn(ctx context.Context, req *turnReq, rt *Runtime, agent *harness.Session, openErr error) {
	g := s.g
	started := time.Now()
	ctx, cancel := context.WithTimeout(ctx, g.cfg.TurnTimeout)
	defer cancel()

	if g.metrics != nil {
		g.metrics.RunningTurns.Inc()
		defer g.metrics.RunningTurns.Dec()
	}
	ch := g.byName[req.target.Channel]
	if ch == nil {
		g.log.Error("no channel for answer", "channel", req.target.Channel)
		return
	}
	// Delivery keeps going briefly after a cancel so that the chat still gets its done frame.
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.TurnTimeout)
	defer dcancel()
	st, err := ch.Open(dctx, req.target)
	if err != nil {
		g.deliveryFailed(req.target, err)
		return
	}
	d := &deliverer{g: g, st: st, target: req.target, ctx: dctx}
	d.send(channels.Frame{Type: channels.FrameStart})

	if openErr != nil {
		g.log.Error("cannot open the chat session", "session", s.key, "err", openErr)
		d.fail(req.info, "turn", "I couldn't start the assistant for this chat: "+openErr.Error())
		return
	}

	select { // the global bound on concurrent turns
	case g.turnSem <- struct{}{}:
		defer func() { <-g.turnSem }()
	case <-ctx.Done():
		d.finishCancelled(ctx, "")
		return
	}

	agent.SetInfo(req.info) // the speaker may differ from the session's last one (groups)
	res, err := agent.Run(ctx, req.prompt, func(u harness.Update) {
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
	})
	switch {
	case res.Aborted || (err != nil && ctx.Err() != nil):
		d.finishCancelled(ctx, res.Text)
		return
	case err != nil:
		if g.metrics != nil {
			g.metrics.ProviderErrors.WithLabelValues(agent.Stats().Provider).Inc()
		}
		g.log.Warn("turn failed", "session", s.key, "err", err)
		d.fail(req.info, "turn", err.Error())
		return
	}

	// message:send runs after the turn settled and before done; its parts go first.
	mode := s.ttsMode
	if mode == "" {
		mode = req.profile.TTSMode
	}
	parts := rt.Bus.Send(dctx, &hooks.MessageSend{
		Session: req.info, InputText: req.prompt, ResponseText: res.Text, IsVoice: req.isVoice,
		TTSMode: mode, Voice: req.profile.TTSVoice, Language: req.profile.TTSLanguage,
	})
	if len(parts) > 0 {
		d.send(channels.Frame{Type: channels.FrameParts, Parts: parts})
	}
	d.send(channels.Frame{Type: channels.FrameDone, Text: res.Text})
	if d.err == nil {
		if g.metrics != nil {
			g.metrics.MessagesOut.WithLabelValues(req.target.Channel).Inc()
			g.metrics.TurnSeconds.Observe(time.Since(started).Seconds())
		}
	}
}

// deliverer sends a turn's frames in order and remembers the first delivery failure; after
// one, only the final done/error is still attempted.
type deliverer struct {
	g      *Gateway
	st     channels.Stream
	target channels.Target
	ctx    context.Context
	err    error
}

func (d *deliverer) send(f channels.Frame) {
	final := f.Type == channels.FrameDone || f.Type == channels.FrameError
	if d.err != nil && !final {
		return
	}
	if err := d.st.Send(d.ctx, f); err != nil {
		if d.err == nil || final {
			d.g.deliveryFailed(d.target, fmt.Errorf("%s frame: %w", f.Type, err))
		}
		d.err = err
	}
}

// fail ends the turn with an error frame the user can read and a gateway:error event.
func (d *deliverer) fail(info hooks.Session, stage, text string) {
	d.g.Runtime().Bus.Emit(d.ctx, &hooks.GatewayError{Session: info, Stage: stage, Error: text})
	d.send(channels.Frame{Type: channels.FrameError, Text: text})
}

// finishCancelled ends a stopped turn: the text said so far stays, and done closes the answer.
func (d *deliverer) finishCancelled(ctx context.Context, partial string) {
	if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		d.send(channels.Frame{Type: channels.FrameError, Text: "This answer took too long and was stopped."})
		return
	}
	d.send(channels.Frame{Type: channels.FrameDone, Text: partial})
}

// buildPrompt turns a message into the text the model sees: group speakers are named,
// replies quoted, and media the model cannot read is described rather than dropped.
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
		case channels.PartImage:
			fmt.Fprintf(&b, "[The user sent an image%s; you cannot see it.]\n", describe(p))
		default:
			fmt.Fprintf(&b, "[The user sent a file%s; you cannot read it.]\n", describe(p))
		}
	}
	if text != "" {
		if msg.ChatType == channels.ChatGroup && msg.UserName != "" {
			fmt.Fprintf(&b, "%s: ", msg.UserName)
		}
		b.WriteString(text)
	}
	return strings.TrimSpace(b.String())
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
