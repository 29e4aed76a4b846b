package gateway

import (
	"context"
	"fmt"
	"strings"

	"gateway/channels"
	"gateway/hooks"
	"gateway/profiles"
)

const helpText = `Commands:
/new — start a new conversation (forget the history)
/stop — stop the answer in progress and drop queued messages
/status — show this chat's profile, model and queue
/voice on|off|auto — answer with voice notes always, never, or when you speak (auto)
/help — this list`

// parseCommand recognises "/cmd arg" and "/cmd@botname arg".
func parseCommand(text string) (cmd, arg string, ok bool) {
	if !strings.HasPrefix(text, "/") || len(text) < 2 {
		return "", "", false
	}
	first, rest, _ := strings.Cut(text, " ")
	first, _, _ = strings.Cut(first[1:], "@")
	return strings.ToLower(first), strings.TrimSpace(rest), true
}

// command runs a control command; it reports false when cmd is not one of ours (the text
// then goes to the model). Commands bypass the turn queue and never reach the model. rt is
// the runtime the message's intake holds, the one prof was resolved from.
func (s *session) command(cmd, arg string, msg *channels.Message, rt *Runtime, prof *profiles.Profile, info hooks.Session) bool {
	g := s.g
	target := channels.TargetOf(msg)
	reply := func(text string) { g.notify(g.ctx, rt.Bus, target, text) }
	switch cmd {
	case "help", "start":
		reply(helpText)
	case "stop":
		dropped := len(s.pending)
		s.dropPending()
		switch {
		case s.cancelRunning("stopped by the user"):
			if dropped > 0 {
				reply(fmt.Sprintf("Stopped. I also dropped %d queued message(s).", dropped))
			} else {
				reply("Stopped.")
			}
		case dropped > 0:
			reply(fmt.Sprintf("Dropped %d queued message(s).", dropped))
		default:
			reply("Nothing to stop.")
		}
	case "new", "reset":
		s.cancelRunning("a new conversation was started")
		s.dropPending()
		if s.running != nil { // let the cancelled turn end before the history changes
			<-s.turnDone
			s.running = nil
		}
		agent, err := s.ensureAgent(&turnReq{profile: prof, info: info}, rt)
		if err == nil {
			ctx, cancel := context.WithTimeout(g.ctx, g.cfg.TurnTimeout)
			err = agent.Reset(ctx)
			cancel()
		}
		if err != nil {
			reply("I couldn't start a new conversation: " + err.Error())
			return true
		}
		reply("Started a new conversation.")
	case "status":
		var b strings.Builder
		fmt.Fprintf(&b, "Profile: %s\n", prof.Name)
		if s.agent != nil {
			st := s.agent.Stats()
			fmt.Fprintf(&b, "Model: %s (%s)\nMessages in history: %d\n", st.Model, st.Provider, st.Messages)
		} else {
			cfg := mergeLLM(rt.LLM, prof.LLM)
			fmt.Fprintf(&b, "Model: %s (%s)\n", cfg.Model, cfg.Provider)
		}
		state := "idle"
		if s.running != nil {
			state = "answering"
		}
		fmt.Fprintf(&b, "State: %s, %d queued\nQueue mode: %s\nVoice replies: %s",
			state, len(s.pending), queueMode(g.cfg.QueueMode, prof), voiceLabel(s.ttsMode, prof.TTSMode))
		reply(b.String())
	case "voice":
		if !rt.VoiceReplies {
			reply("Voice replies are not set up on this gateway (tts.mode is off), so I answer in text.")
			return true
		}
		switch strings.ToLower(arg) {
		case "on", "always":
			s.ttsMode = "always"
		case "off":
			s.ttsMode = "off"
		case "auto", "inbound":
			s.ttsMode = "inbound"
		case "", "status":
		default:
			reply("Use /voice on, /voice off or /voice auto.")
			return true
		}
		reply("Voice replies: " + voiceLabel(s.ttsMode, prof.TTSMode))
	default:
		return false
	}
	return true
}

func voiceLabel(chat, profile string) string {
	mode := chat
	if mode == "" {
		mode = profile
	}
	switch mode {
	case "always":
		return "on (every answer)"
	case "off":
		return "off"
	case "inbound":
		return "auto (when you send a voice note)"
	}
	return "default (as configured)"
}
