package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"gateway/channels"
	"gateway/harness"
	"gateway/hooks"
	"gateway/profiles"
)

// BuiltinCommands are the gateway's own commands, in /help's order. A hook command may not
// take one of these names.
func BuiltinCommands() []hooks.RegisteredCommand {
	return []hooks.RegisteredCommand{
		{Name: "new", Description: "start a new conversation (forget the history)"},
		{Name: "stop", Description: "stop the answer in progress and drop queued messages"},
		{Name: "compact", Description: "[instructions] summarise the older part of the conversation to make room"},
		{Name: "status", Description: "show this chat's profile, model, context use and queue"},
		{Name: "voice", Description: "on|off|auto answer with voice notes always, never, or when you speak (auto)"},
		{Name: "help", Description: "this list"},
	}
}

// reservedCommands are aliases of builtins, also refused to hooks.
var reservedCommands = []hooks.RegisteredCommand{
	{Name: "start", Description: "alias of /help"},
	{Name: "reset", Description: "alias of /new"},
}

// NewCommandRegistry returns a registry holding the builtin commands (and their aliases),
// for hook directories to declare theirs in.
func NewCommandRegistry() *hooks.Registry {
	return hooks.NewRegistry(append(BuiltinCommands(), reservedCommands...))
}

// menuCommands are the commands platforms offer natively: every profile's builtins and
// hooks' commands (a profile's own hook commands still work when typed), aliases left out.
func menuCommands(reg *hooks.Registry) []channels.Command { return menuCommandsFor(reg, "") }

// menuCommandsFor are the commands a chat of the profile has, for its native menu.
func menuCommandsFor(reg *hooks.Registry, profile string) []channels.Command {
	cmds := reg.Commands(profile)
	if reg == nil {
		cmds = BuiltinCommands()
	}
	var out []channels.Command
	for _, c := range cmds {
		if c.Run == nil && slices.ContainsFunc(reservedCommands, func(r hooks.RegisteredCommand) bool { return r.Name == c.Name }) {
			continue
		}
		d := c.Description
		if args, rest, ok := strings.Cut(d, " "); ok && c.Run == nil && (strings.HasPrefix(args, "[") || strings.Contains(args, "|")) {
			d = rest
		}
		if d != "" {
			d = strings.ToUpper(d[:1]) + d[1:]
		}
		out = append(out, channels.Command{Name: c.Name, Description: d})
	}
	return out
}

// menuSignature sums up every menu a runtime offers, to tell whether a reload changed one.
func menuSignature(rt *Runtime) string {
	sig := fmt.Sprint(menuCommands(rt.Commands))
	if rt.Profiles != nil {
		for _, b := range rt.Profiles.Bindings() {
			sig += fmt.Sprint(b.Match, menuCommandsFor(rt.Commands, b.Profile))
		}
	}
	return sig
}

// pushCommands gives every started adapter with a native command menu the runtime's
// commands; a channel still trying to start gets its menu once it does (retryStart). A
// failure is logged: typed commands still work.
func (g *Gateway) pushCommands(ctx context.Context, rt *Runtime) {
	g.menuMu.Lock()
	defer g.menuMu.Unlock()
	for _, ch := range g.channels {
		if !g.isWaiting(ch.Name()) {
			g.pushMenu(ctx, rt, ch)
		}
	}
}

// pushMenu gives ch, when it has a native command menu, the runtime's commands; g.menuMu
// is held.
func (g *Gateway) pushMenu(ctx context.Context, rt *Runtime, ch channels.Channel) {
	m, ok := ch.(channels.CommandMenu)
	if !ok {
		return
	}
	cmds := menuCommands(rt.Commands)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	if err := m.SetCommands(cctx, cmds); err != nil {
		g.log.Warn("cannot update the platform's command menu; typed commands still work", "channel", ch.Name(), "err", err)
	}
	cancel()
	cm, ok := ch.(channels.ChatCommandMenu)
	if !ok || rt.Profiles == nil {
		return
	}
	setChat := func(chat string, menu []channels.Command) {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := cm.SetChatCommands(cctx, chat, menu); err != nil {
			g.log.Warn("cannot set a chat's command menu; typed commands still work", "channel", ch.Name(), "chat", chat, "err", err)
		}
	}
	// A chat bound to a profile gets the menu of its profile, even one equal to the common
	// menu: on the platform a chat's own menu outranks the common one, so a menu given
	// before (by an earlier runtime or run) would otherwise keep commands that are gone.
	given := map[string]bool{}
	for _, b := range rt.Profiles.Bindings() {
		mt := b.Match
		if mt.Channel != ch.Name() || mt.Chat == "" || mt.Thread != "" || mt.User != "" || given[mt.Chat] {
			continue // of two bindings of one chat, the first listed wins, as in routing
		}
		given[mt.Chat] = true
		setChat(mt.Chat, menuCommandsFor(rt.Commands, b.Profile))
	}
	for chat := range g.menuChats(ch.Name()) {
		if !given[chat] {
			setChat(chat, cmds) // no longer bound: back to the common menu
		}
	}
	g.keepMenuChats(ch.Name(), given)
}

// menuChatsSetting names, in the settings' "gateway" scope, the chats of a channel given a
// menu of their own, so that a chat unbound while the gateway was down gets the common
// menu back at the next start too.
const menuChatsSetting = "menu-chats:"

// menuChats are the chats of channel given a menu of their own by the last push: this
// run's, or, at the first push of a run, the last run's as the settings keep them.
// g.menuMu is held.
func (g *Gateway) menuChats(channel string) map[string]bool {
	if chats, ok := g.chatMenus[channel]; ok || g.settings == nil {
		return chats
	}
	chats := map[string]bool{}
	v, ok, err := g.settings.Setting("gateway", menuChatsSetting+channel)
	if err != nil {
		g.log.Warn("cannot read which chats have a command menu of their own", "channel", channel, "err", err)
	}
	if ok {
		var list []string
		if json.Unmarshal([]byte(v), &list) == nil {
			for _, c := range list {
				chats[c] = true
			}
		}
	}
	return chats
}

// keepMenuChats records the chats of channel now given a menu of their own; g.menuMu is held.
func (g *Gateway) keepMenuChats(channel string, chats map[string]bool) {
	was, known := g.chatMenus[channel]
	g.chatMenus[channel] = chats
	if g.settings == nil || (known && maps.Equal(was, chats)) {
		return
	}
	list := slices.Sorted(maps.Keys(chats))
	var err error
	if len(list) == 0 {
		err = g.settings.DeleteSetting("gateway", menuChatsSetting+channel)
	} else {
		b, _ := json.Marshal(list)
		err = g.settings.SetSetting("gateway", menuChatsSetting+channel, string(b))
	}
	if err != nil {
		g.log.Warn("cannot keep which chats have a command menu of their own", "channel", channel, "err", err)
	}
}

// helpText lists the commands a chat of the profile can use: builtins, then hooks', each
// under the name its platform has users type (namer, may be nil).
func helpText(reg *hooks.Registry, profile string, namer channels.CommandNamer) string {
	cmds := reg.Commands(profile)
	if reg == nil {
		cmds = BuiltinCommands()
	}
	var b strings.Builder
	b.WriteString("Commands:")
	for _, c := range cmds {
		if slices.ContainsFunc(reservedCommands, func(r hooks.RegisteredCommand) bool { return r.Name == c.Name && c.Run == nil }) {
			continue
		}
		name := c.Name
		if namer != nil {
			name = namer.CommandName(name)
		}
		d := c.Description
		if args, rest, ok := strings.Cut(d, " "); ok && c.Run == nil && (strings.HasPrefix(args, "[") || strings.Contains(args, "|")) {
			fmt.Fprintf(&b, "\n/%s %s — %s", name, args, rest)
			continue
		}
		fmt.Fprintf(&b, "\n/%s — %s", name, d)
	}
	if namer != nil && namer.HelpNote() != "" {
		b.WriteString("\n\n" + namer.HelpNote())
	}
	return b.String()
}

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
// the runtime the message's intake holds, the one prof was resolved from. queued reports
// that the command was not answered here but queued as a turn (/compact, a hook's command),
// which settles the message once its answer reached the chat: until then it stays in the
// intake journal, so that a crash or a restart before that runs it after the restart
// rather than never.
func (s *session) command(cmd, arg string, msg *channels.Message, rt *Runtime, prof *profiles.Profile, info hooks.Session) (handled, queued bool) {
	g := s.g
	target := channels.TargetOf(msg)
	reply := func(text string) { g.notify(g.ctx, rt.Bus, target, text) }
	// A command queued as a turn finishes an answer a crash cut, as a message's turn does.
	turnTarget := target
	turnTarget.Resume = answerResume(msg)
	switch cmd {
	case "help", "start":
		namer, _ := g.byName[msg.Channel].(channels.CommandNamer)
		reply(helpText(rt.Commands, prof.Name, namer))
	case "stop":
		dropped := len(s.pending) + int(s.stopDropped.Swap(0))
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
			s.turnEnded(<-s.turnDone)
		}
		agent, err := s.ensureAgent(&turnReq{profile: prof, info: info}, rt)
		if err != nil {
			reply(g.openFailed(s.key, err))
			return true, false
		}
		ctx, cancel := context.WithTimeout(g.ctx, g.cfg.TurnTimeout)
		err = agent.Reset(ctx)
		cancel()
		var save *harness.SaveError
		switch {
		case errors.As(err, &save):
			// The history file's error names the server's paths: the admin's, in the log.
			g.log.Error("/new: the fresh conversation could not be saved", "session", s.key, "err", err)
			reply("Sorry, I couldn't start a new conversation: I could not save the change. The gateway's log tells its admin why.")
			return true, false
		case err != nil:
			// A hook's refusal (its reason is written for the chat), or an answer still running.
			reply("I couldn't start a new conversation: " + err.Error())
			return true, false
		}
		reply("Started a new conversation.")
	case "compact":
		// It needs the model, so it takes its place in the chat's queue like a message
		// (after the answer in progress; /stop cancels it), whatever the queue mode.
		// The turn holds the runtime it was taken with, as a message's turn does.
		release := func() {}
		if rt.enter() {
			release = rt.leave
		}
		s.dispatch(&turnReq{prompt: arg, profile: prof, info: info, target: turnTarget, compact: true, rt: rt, release: release,
			seqs: []uint64{msg.Seq}}, QueueFollowup)
		return true, true
	case "status":
		var b strings.Builder
		fmt.Fprintf(&b, "Profile: %s\n", prof.Name)
		// Open the chat's history as its next message would, to tell its context use. An idle
		// chat whose profile a reload changed is reopened too: otherwise /status shows the model
		// and window from before the reload, as if the reload had done nothing.
		if s.agent == nil || s.running == nil && (s.agentRT != rt || s.agentProfile != prof) {
			if _, err := s.ensureAgent(&turnReq{profile: prof, info: info}, rt); err != nil {
				g.log.Warn("status: cannot open the chat session", "session", s.key, "err", err)
			}
		}
		if s.agent != nil {
			st := s.agent.Stats()
			fmt.Fprintf(&b, "Model: %s (%s)\nMessages in history: %d\n", modelName(st.Model), st.Provider, st.Messages)
			b.WriteString(contextLine(st))
		} else {
			cfg := mergeLLM(rt.LLM, prof.LLM)
			fmt.Fprintf(&b, "Model: %s (%s)\n", modelName(cfg.Model), cfg.Provider)
		}
		state := "idle"
		if s.running != nil {
			state = "answering"
		}
		mode := queueMode(g.cfg.QueueMode, prof)
		fmt.Fprintf(&b, "State: %s, %d queued\nQueue mode: %s (%s)\nVoice replies: %s",
			state, len(s.pending), mode, queueLabel(mode), voiceLabel(s.spokenWhen(rt, prof), rt))
		reply(b.String())
	case "voice":
		if !voiceReplies(rt) {
			reply("Voice replies are not set up on this gateway, so I answer in text.")
			return true, false
		}
		switch strings.ToLower(arg) {
		case "on", "always":
			s.setVoiceMode("always")
		case "off":
			s.setVoiceMode("off")
		case "auto", "inbound":
			s.setVoiceMode("inbound")
		case "", "status":
		default:
			reply("Use /voice on, /voice off or /voice auto.")
			return true, false
		}
		if arg != "" && arg != "status" && g.settings != nil {
			// A choice outlives the session's eviction and a restart.
			if err := g.settings.SetSetting(s.key, "voice", s.voiceMode()); err != nil {
				g.log.Error("cannot save the chat's /voice choice", "session", s.key, "err", err)
				reply("Voice replies: " + voiceLabel(s.spokenWhen(rt, prof), rt) + " (for now: I could not save this choice, so it lasts until I restart)")
				return true, false
			}
		}
		reply("Voice replies: " + voiceLabel(s.spokenWhen(rt, prof), rt))
	default:
		hc, ok := rt.Commands.Command(cmd, prof.Name)
		if !ok || hc.Run == nil {
			return false, false
		}
		// A hook command reads and may change the session's entries, and may prompt the
		// model: it takes its place in the chat's queue, like /compact.
		release := func() {}
		if rt.enter() {
			release = rt.leave
		}
		req := &turnReq{prompt: arg, profile: prof, info: info, target: turnTarget, hookCmd: &hc, rt: rt, release: release,
			seqs: []uint64{msg.Seq}}
		if msg.Seq != 0 {
			// The prompt a hook's command may give the model is the message's: asked once
			// when the command runs again after a crash.
			req.asked = harness.Attempt{ID: intakeID(msg), Again: msg.Replayed}
		}
		s.dispatch(req, QueueFollowup)
		return true, true
	}
	return true, false
}

// commandTurn runs a hook command: the hook gets the session's entries and answers with
// text (sent without the model), entries (appended) and/or a prompt. It returns the
// prompt for the agent, "" when the command was answered.
func (s *session) commandTurn(ctx context.Context, d *deliverer, req *turnReq, agent *harness.Session) (prompt string) {
	entries, err := agent.Entries()
	if err != nil {
		s.g.log.Warn("command: cannot read the session", "session", s.key, "err", err)
	}
	if entries == nil {
		entries = []json.RawMessage{}
	}
	args := strings.Fields(req.prompt)
	if args == nil {
		args = []string{}
	}
	ev := &hooks.Command{Session: req.info, Name: req.hookCmd.Name, Args: args, ArgsRaw: req.prompt, Entries: entries}
	res, err := req.hookCmd.Run(ctx, ev)
	if err != nil {
		s.g.log.Warn("hook command failed", "session", s.key, "command", req.hookCmd.Name, "source", req.hookCmd.Source, "err", err)
		req.rt.Bus.Emit(d.ctx, &hooks.GatewayError{Session: req.info, Stage: "turn", Error: fmt.Sprintf("command /%s (%s): %v", req.hookCmd.Name, req.hookCmd.Source, err)})
		defer d.settle()()
		if ctx.Err() != nil {
			d.finishCancelled(ctx, "")
		} else {
			d.fail("turn", fmt.Sprintf("The command /%s failed.", req.hookCmd.Name), nil)
		}
		return ""
	}
	if err := agent.AppendEntries(res.Entries); err != nil {
		// Entries the history refuses are the hook's fault, a file that cannot be written
		// the server's: neither is the chat's to read (the log and gateway:error say which).
		s.g.log.Error("command: cannot save its entries", "session", s.key, "command", req.hookCmd.Name, "source", req.hookCmd.Source, "err", err)
		defer d.settle()()
		d.fail("turn", fmt.Sprintf("The command /%s failed: its result could not be saved.", req.hookCmd.Name),
			fmt.Errorf("command /%s (%s): saving its entries: %w", req.hookCmd.Name, req.hookCmd.Source, err))
		return ""
	}
	if res.Prompt != "" {
		if res.Text != "" {
			// A message of its own, before the model's answer: a status line would be
			// dropped by Telegram and Discord and removed by the web page at done.
			d.send(channels.Frame{Type: channels.FrameParts, Parts: []channels.Part{channels.TextPart(res.Text)}})
		}
		return res.Prompt
	}
	text := res.Text
	if text == "" {
		text = "Done."
	}
	defer d.settle()()
	d.send(channels.Frame{Type: channels.FrameDone, Text: text})
	return ""
}

// voiceReplies tells whether the gateway can answer with voice at all (a text-to-speech
// hook is set up).
func voiceReplies(rt *Runtime) bool { return rt.VoiceMode != "" && rt.VoiceMode != "off" }

// spokenWhen is the voice mode in effect for the chat, as the text-to-speech hook resolves
// it (tts.TTS.Speaks): the chat's /voice choice, else its profile's, else the gateway's;
// off when the gateway has no voice replies, whatever the choices.
func (s *session) spokenWhen(rt *Runtime, prof *profiles.Profile) string {
	if !voiceReplies(rt) {
		return profiles.TTSOff
	}
	switch m := s.voiceChoice(prof); m {
	case profiles.TTSOff, profiles.TTSInbound, profiles.TTSAlways:
		return m
	}
	return rt.VoiceMode
}

// voiceLabel says a voice mode (spokenWhen) the way the chat's user reads it.
func voiceLabel(mode string, rt *Runtime) string {
	switch {
	case !voiceReplies(rt):
		return "off (voice replies are not set up on this gateway)"
	case mode == profiles.TTSAlways:
		return "on (every answer)"
	case mode == profiles.TTSInbound:
		return "auto (when you send a voice note)"
	}
	return "off"
}

// queueLabel says what a queue mode does with a message sent while an answer is running.
func queueLabel(mode string) string {
	switch mode {
	case profiles.QueueSteer:
		return "what you send while I answer is added to the answer in progress"
	case profiles.QueueCollect:
		return "what you send while I answer is answered together, once I am done"
	case profiles.QueueInterrupt:
		return "what you send while I answer stops that answer, and I answer the new message"
	}
	return "what you send while I answer is answered after it, in order"
}

// modelName is a model as /status names it: one left empty is none chosen.
func modelName(m string) string {
	if m == "" {
		return "none chosen yet"
	}
	return m
}

// contextLine says how much of the model's window the conversation uses and when it was
// last compacted.
func contextLine(st harness.Stats) string {
	var b strings.Builder
	if st.ContextWindow > 0 {
		fmt.Fprintf(&b, "Context: about %s of %s tokens (%d%%)\n", thousands(st.ContextTokens), thousands(st.ContextWindow),
			st.ContextTokens*100/st.ContextWindow)
	}
	if st.LastCompaction.IsZero() {
		b.WriteString("Last compaction: none\n")
	} else {
		by := ""
		if st.LastCompactionFromHook {
			by = ", summary by a hook"
		}
		fmt.Fprintf(&b, "Last compaction: %s (%s tokens summarised%s)\n",
			st.LastCompaction.UTC().Format("2006-01-02 15:04 UTC"), thousands(st.LastCompactionTokens), by)
	}
	return b.String()
}

// thousands writes n with thin separators: 128000 → "128,000".
func thousands(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return s
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// compactTurn runs /compact as a turn: a status line, then the outcome as the answer.
func (s *session) compactTurn(ctx context.Context, d *deliverer, req *turnReq, agent *harness.Session) {
	d.send(channels.Frame{Type: channels.FrameStatus, Text: "Summarising the earlier conversation…"})
	res, err := agent.Compact(ctx, req.prompt)
	defer d.settle()()
	var cancelled *harness.CompactCancelledError
	switch {
	case ctx.Err() != nil:
		d.finishCancelled(ctx, "")
	case errors.Is(err, harness.ErrNothingToCompact):
		d.send(channels.Frame{Type: channels.FrameDone, Text: "There is nothing to compact yet: the conversation is still short."})
	case errors.As(err, &cancelled):
		d.send(channels.Frame{Type: channels.FrameDone, Text: "The conversation was not compacted: " + strings.TrimPrefix(cancelled.Error(), "a hook refused to compact this conversation: ")})
	case err != nil:
		s.g.log.Warn("compaction failed", "session", s.key, "err", err)
		text, admin := userText(err)
		if !admin {
			text = "I couldn't summarise the conversation: " + text
		}
		d.fail("turn", text, err)
	default:
		d.send(channels.Frame{Type: channels.FrameDone, Text: fmt.Sprintf(
			"Compacted: %d earlier messages are now a summary; the conversation went from about %s to %s tokens.",
			res.Summarised, thousands(res.TokensBefore), thousands(res.TokensAfter))})
	}
}
