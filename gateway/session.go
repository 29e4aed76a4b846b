package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"gateway/channels"
	"gateway/harness"
	"gateway/hooks"
	"gateway/internal/llm"
	"gateway/profiles"
)

// session is one chat's actor. Its loop goroutine owns every field below evictTimer
// except where noted; the running turn is a second goroutine the loop starts. The loop runs only
// while the chat has work for it (see loop): a chat that is idle, or waiting on its model,
// holds no goroutine of its own.
type session struct {
	g   *Gateway
	key string

	mailbox chan *channels.Message // bounded: Deliver never blocks on a busy chat
	ctl     chan func(*session)    // work of the admin API, run on the actor (bounded)
	// Guarded by g.mu: whether a loop goroutine runs, whether the chat is idle (nothing
	// running or queued; only while parked), whether it left g.sessions, and the timer
	// that evicts it after sessions.idle_evict parked idle.
	active     bool
	idle       bool
	closed     bool
	evictTimer *time.Timer
	// replayed are messages journaled before the restart, older than any in the mailbox
	// (Deliver waits for its channel's replay): taken first, and not bounded by
	// queue_size, which let them in before the restart; the journal bounds them. Guarded
	// by g.mu; replaying counts them, so that the loop looks without the lock.
	replayed  []*channels.Message
	replaying atomic.Int32
	// stopIntake cancels the receive hooks of the message the actor is taking in, for a
	// /stop that arrives meanwhile (control commands do not wait behind the queue);
	// stopDropped counts the messages so dropped, for the /stop's answer.
	stopIntake  atomic.Pointer[context.CancelCauseFunc]
	stopDropped atomic.Int32

	pending  []*turnReq
	running  *runningTurn
	turnDone chan turnOutcome
	// cutIntake is the chat of a message whose intake (media download, receive hooks)
	// shutdown cut: abortAll tells it, as it tells a chat whose message waited in the queue.
	cutIntake *channels.Target

	agent        *harness.Session
	agentRT      *Runtime
	agentProfile *profiles.Profile
	// ttsMode is the chat's /voice choice; "" follows the profile/config. Its loop sets it
	// (/voice) while a turn may be reading it for the answer it is finishing.
	ttsMode    atomic.Pointer[string]
	formerChat string // the chat's id before the platform gave it this one (migrate.go); "" when none
	// nextTurn are messages injected for the next turn (deliver_as next_turn): they go
	// before its prompt. Journaled, they answer with that turn: out of the journal once
	// its answer is delivered, and waiting for the next turn again after a crash.
	nextTurn []nextText
}

// nextText is a message kept for a chat's next turn; seq is its journal entry (0: none).
type nextText struct {
	text string
	seq  uint64
	// parked: seq is of the shared intake (cluster mode), which may have handed it to
	// another process since (SharedIntake.Park).
	parked bool
}

// turnReq is one turn to run: the prompt and where to answer.
type turnReq struct {
	prompt  string
	parts   []llm.Part // images and documents, by path (kept under state_dir/media)
	isVoice bool
	profile *profiles.Profile
	info    hooks.Session
	target  channels.Target
	// rt is the runtime the message was taken with (its profile came from it): the turn
	// runs with it. It is held until release, called once the turn ended or was dropped.
	compact bool // /compact: prompt holds its instructions (see compactTurn)
	// hookCmd is a hook's command: prompt holds its arguments (see commandTurn).
	hookCmd *hooks.RegisteredCommand
	seqs    []uint64 // the journaled messages it answers
	// asked names its first message to the agent, so that a message answered again after
	// a crash is asked once (harness.Attempt).
	asked   harness.Attempt
	rt      *Runtime
	release func()
}

// drop releases the request's runtime; it is idempotent.
func (r *turnReq) drop() {
	if r.release != nil {
		r.release()
		r.release = nil
	}
}

// dropPending releases every waiting turn and empties the queue. The user dropped them
// (/stop, /new, a newer message in interrupt mode), so they leave the intake journal too.
func (s *session) dropPending() {
	for _, r := range s.pending {
		s.g.settle(r.seqs...)
		r.drop()
	}
	s.pending = nil
}

type runningTurn struct {
	cancel context.CancelCauseFunc
	seqs   []uint64 // the journaled messages it answers (steered ones join)
}

// turnEnded records the end of the running turn: unless shutdown cut it, the messages it
// answered leave the intake journal (a cut one is answered again, in full, after restart).
func (s *session) turnEnded(out turnOutcome) {
	switch {
	case s.running == nil, out.cut:
	case out.undelivered && s.g.durable():
		s.g.log.Warn("the answer did not reach the chat; its message stays journaled and is answered again after a restart", "session", s.key)
	default:
		s.g.settle(s.running.seqs...)
	}
	s.running = nil
}

type turnOutcome struct {
	cut         bool // by shutdown: its messages stay journaled
	undelivered bool // its answer's last frame failed on what may pass: they stay journaled
}

func newSession(g *Gateway, key string) *session {
	s := &session{
		g:        g,
		key:      key,
		mailbox:  make(chan *channels.Message, g.cfg.QueueSize),
		ctl:      make(chan func(*session), 16),
		turnDone: make(chan turnOutcome, 1),
	}
	if g.settings != nil {
		if v, ok, err := g.settings.Setting(key, "voice"); err != nil {
			g.log.Warn("cannot read the chat's /voice choice", "session", key, "err", err)
		} else if ok {
			s.ttsMode.Store(&v)
		}
		if v, ok, err := g.settings.Setting(key, formerChatSetting); err == nil && ok {
			s.formerChat = v
		}
	}
	return s
}

// profile is the profile of the chat's message: the bindings of the chat's former id
// (migrate.go) apply to it until one names its new id, so that a Telegram group upgraded
// to a supergroup keeps its profile before the admin edits gateway.yaml.
func (s *session) profile(rt *Runtime, channel, chat, thread, user string) *profiles.Profile {
	if s.formerChat != "" && !rt.Profiles.NamesChat(channel, chat) {
		chat = s.formerChat
	}
	return rt.Profiles.Resolve(channel, chat, thread, user)
}

// loop is the actor: it takes messages in order, runs their receive hooks and commands,
// queues turns per the queue mode and starts them one at a time. It runs while there is
// work and then parks (returns): enqueue and control start it again with the next message
// (wake), and a turn's end does with its outcome. A goroutine per known chat would hold a
// stack for every chat that is idle or waiting on its model (docs/bench.md, seventh pass).
func (s *session) loop() {
	defer s.g.actors.Done()
	for {
		if s.g.ctx.Err() != nil { // past Stop's deadline
			s.abortAll()
			s.g.mu.Lock()
			s.active = false
			s.g.dropSessionLocked(s)
			s.g.mu.Unlock()
			return
		}
		if msg := s.takeReplayed(); msg != nil {
			s.intake(msg)
			s.startNext()
			continue
		}
		select {
		case fn := <-s.ctl:
			fn(s)
			s.startNext()
		case msg := <-s.mailbox:
			s.intake(msg)
			s.startNext()
		case out := <-s.turnDone:
			s.turnEnded(out)
			s.startNext()
		default:
			if s.park() {
				return
			}
		}
	}
}

// park ends the loop when nothing is left for it; it reports false when work arrived
// meanwhile. It holds g.mu, as wake does, so that no message can be queued unseen between
// the check and the loop's end. A chat with a turn running parks too: the turn's end wakes
// it. An idle one is evicted after sessions.idle_evict, or at once once Stop began.
func (s *session) park() bool {
	g := s.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(s.mailbox) > 0 || len(s.ctl) > 0 || len(s.turnDone) > 0 || len(s.replayed) > 0 || g.ctx.Err() != nil {
		return false
	}
	s.active = false
	if s.running != nil {
		return true
	}
	if g.stopping.Load() {
		g.dropSessionLocked(s)
		return true
	}
	s.idle = true
	if s.evictTimer == nil {
		s.evictTimer = time.AfterFunc(g.cfg.IdleEvict, func() { g.evictIdle(s) })
	} else {
		s.evictTimer.Reset(g.cfg.IdleEvict)
	}
	return true
}

// voiceMode is the chat's /voice choice, "" when it follows the profile.
func (s *session) voiceMode() string {
	if v := s.ttsMode.Load(); v != nil {
		return *v
	}
	return ""
}

func (s *session) setVoiceMode(v string) { s.ttsMode.Store(&v) }

// voiceChoice is the chat's /voice choice, else its profile's tts_mode ("" for neither):
// what message:send carries for the text-to-speech hook to resolve against tts.mode.
func (s *session) voiceChoice(prof *profiles.Profile) string {
	if m := s.voiceMode(); m != "" {
		return m
	}
	return prof.TTSMode
}

// errStopIntake is the cause a /stop gives the receive hooks of a message it drops.
var errStopIntake = errCancelled("stopped by the user")

// takeReplayed returns the oldest message replayed from the journal, nil when none waits.
func (s *session) takeReplayed() *channels.Message {
	if s.replaying.Load() == 0 {
		return nil
	}
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	msg := s.replayed[0]
	s.replayed[0] = nil
	s.replayed = s.replayed[1:]
	s.replaying.Add(-1)
	return msg
}

// wakeLocked starts s's loop unless it runs; g.mu is held, and something was just queued
// for it (a message, control work, a turn's outcome).
func (g *Gateway) wakeLocked(s *session) {
	if s.active || s.closed {
		return
	}
	s.active, s.idle = true, false
	if s.evictTimer != nil {
		s.evictTimer.Stop()
	}
	g.actors.Add(1)
	go s.loop()
}

// evictIdle frees the memory of a chat that stayed idle for sessions.idle_evict (its
// history stays in the store).
func (g *Gateway) evictIdle(s *session) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s.idle {
		g.dropSessionLocked(s)
	}
}

// abortAll, at shutdown past Stop's deadline, cancels the running turn and waits for it
// to end, and tells the chat once that what was still waiting will not be answered.
func (s *session) abortAll() {
	if s.running != nil {
		s.running.cancel(errShutdown)
		s.turnEnded(<-s.turnDone)
	}
	first := s.cutIntake
	s.cutIntake = nil
	bus := s.g.Runtime().Bus
	if first == nil && len(s.pending) > 0 {
		first, bus = &s.pending[0].target, s.pending[0].rt.Bus
	}
	for _, r := range s.pending { // still journaled: answered after the restart
		r.drop()
	}
	s.pending = nil
	for drained := false; !drained; {
		select {
		case msg := <-s.mailbox:
			if first == nil {
				t := channels.TargetOf(msg)
				first = &t
			}
		default:
			drained = true
		}
	}
	if first == nil {
		return
	}
	// g.ctx is done; Stop gives the actors a few seconds before it stops the channels.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.g.ctx), 3*time.Second)
	defer cancel()
	text := "Sorry, I'm restarting and couldn't get to your waiting messages. Please send them again in a minute."
	if s.g.durable() {
		text = "I'm restarting; I'll answer your waiting messages when I'm back in a moment."
	}
	s.g.notify(ctx, bus, *first, text)
}

// intakeCut remembers that shutdown cut msg before it was queued, for abortAll to tell.
func (s *session) intakeCut(msg *channels.Message) {
	if s.cutIntake == nil {
		t := channels.TargetOf(msg)
		s.cutIntake = &t
	}
}

// intake runs one message through message:receive, commands and the queue mode. The
// runtime is taken here, once per message: its receive hooks, its command and its turn
// all use it, whatever a reload does meanwhile.
func (s *session) intake(msg *channels.Message) {
	g := s.g
	if msg.MigrateFrom != "" {
		if s.migrate(msg) {
			g.settle(msg.Seq)
		}
		return
	}
	if msg.Injected {
		s.injected(msg)
		return
	}
	rt, release := g.acquire()
	kept := false   // the runtime is handed to the turn request
	queued := false // the message is answered by a turn queued for it (/compact, a hook's command)
	defer func() {
		if !kept {
			release()
			// Answered without a turn (a command, a reject): it leaves the journal, unless
			// shutdown cut it before anyone answered.
			if !queued && g.ctx.Err() == nil {
				g.settle(msg.Seq)
			}
		}
	}()
	prof := s.profile(rt, msg.Channel, msg.ChatID, msg.ThreadID, msg.UserID)
	info := hooks.Session{SessionKey: s.key, Channel: msg.Channel, ChatID: msg.ChatID, ThreadID: msg.ThreadID, UserID: msg.UserID, Profile: prof.Name}

	if !s.fetch(msg, rt) {
		return // told why; answered so
	}
	ev := &hooks.MessageReceive{
		Session: info, MessageID: msg.ID, ChatType: msg.ChatType, Mentioned: msg.Mentioned,
		ReplyTo: msg.ReplyTo, Parts: msg.Parts, IsVoice: msg.IsVoice, Language: prof.Language,
	}
	// A handler that fails is skipped (the error policy) but reported for this chat: a
	// filter that crashed lets through what it should have stopped, which an admin must learn.
	var failures []string
	stopCtx, stop := context.WithCancelCause(g.ctx)
	s.stopIntake.Store(&stop)
	ctx, cancel := context.WithTimeout(stopCtx, g.cfg.TurnTimeout)
	rejected := rt.Bus.Receive(hooks.WithFailureReport(ctx, func(source string, err error) {
		failures = append(failures, fmt.Sprintf("message:receive hook %s failed: %v", source, err))
	}), ev)
	chainErr := ctx.Err()
	s.stopIntake.Store(nil)
	cancel()
	stopped := errors.Is(context.Cause(stopCtx), errStopIntake)
	stop(nil)
	for _, f := range failures { // the bus has logged and counted them
		rt.Bus.Emit(g.ctx, &hooks.GatewayError{Session: info, Stage: "receive", Error: f})
	}
	if stopped && rejected == nil {
		g.log.Info("message dropped by /stop while its receive hooks ran", "session", s.key, "id", msg.ID)
		s.stopDropped.Add(1) // the /stop, next in the mailbox, tells it
		return
	}
	if chainErr != nil && rejected == nil {
		if g.ctx.Err() != nil {
			s.intakeCut(msg) // shutting down: still journaled, answered after the restart
			return
		}
		// The chain did not finish, so later handlers (filters, STT) never saw the message:
		// passing it on would skip them.
		g.log.Warn("receive hooks ran out of time", "session", s.key, "limit", g.cfg.TurnTimeout)
		rt.Bus.Emit(g.ctx, &hooks.GatewayError{Session: info, Stage: "receive",
			Error: fmt.Sprintf("message:receive hooks did not finish within turn_timeout (%s)", g.cfg.TurnTimeout)})
		g.reject(msg, rt.Bus, "receive_timeout", "Sorry, I couldn't process your message in time. Please send it again.")
		return
	}
	if rejected != nil {
		reason := rejected.Reason
		if reason == "" {
			reason = "Sorry, this message was not accepted."
		}
		g.reject(msg, rt.Bus, "hook", reason)
		return
	}
	msg.Parts, msg.IsVoice = ev.Parts, ev.IsVoice
	text := strings.TrimSpace(ev.Text)
	// What a handler left out of the message (audio it could not transcribe) is told before
	// the answer, once: after a crash, msg.Resume says it was (the answer began to show, or
	// these notices did).
	shown := func() {
		if keep := g.placer(s.key, msg.Seq, intakeID(msg)); keep != nil {
			keep(noticesShown)
		}
	}
	if len(ev.Notices) > 0 && msg.Resume == "" && g.notify(g.ctx, rt.Bus, channels.TargetOf(msg), strings.Join(ev.Notices, "\n")) {
		shown()
	}

	if cmd, arg, ok := parseCommand(text); ok {
		var handled bool
		if handled, queued = s.command(cmd, arg, msg, rt, prof, info); handled {
			return
		}
	}
	// Shown before a crash (msg.Resume), the echo is not shown again.
	if msg.IsVoice && g.cfg.EchoTranscript && text != "" && msg.Resume == "" && g.notify(g.ctx, rt.Bus, channels.TargetOf(msg), "🎤 "+text) {
		shown()
	}
	prompt := buildPrompt(msg, text)
	parts := g.keepMedia(msg)
	if prompt == "" && len(parts) == 0 {
		g.reject(msg, rt.Bus, "empty", "I received an empty message, so there is nothing to answer.")
		return
	}
	target := channels.TargetOf(msg)
	target.Resume = answerResume(msg) // the turn's answer finishes the one a crash cut, not the notices above
	req := &turnReq{prompt: prompt, parts: parts, isVoice: msg.IsVoice, profile: prof, info: info,
		target: target, rt: rt, release: release, seqs: []uint64{msg.Seq}}
	if msg.Seq != 0 {
		req.asked = harness.Attempt{ID: intakeID(msg), Again: msg.Replayed}
	}
	kept = true
	s.dispatch(req, queueMode(g.cfg.QueueMode, prof))
}

// fetch downloads the message's referenced media through its channel's Fetcher, here on
// the chat's own goroutine, so that the adapter's intake never waits on a download and the
// message was journaled before the platform was acknowledged. It reports false when the
// message is done with: the fetch failed (the user is told the error's words) or shutdown
// cut it (it stays journaled and is fetched again after the restart).
func (s *session) fetch(msg *channels.Message, rt *Runtime) bool {
	g := s.g
	if !msg.HasRefs() {
		return true
	}
	f := g.fetcher(msg.Channel)
	if f == nil {
		// Nobody can download it: the agent is told what arrived instead of a reference.
		for i, p := range msg.Parts {
			if p.Ref != "" {
				msg.Parts[i] = channels.TextPart(fmt.Sprintf("[The user sent a %s that could not be fetched]", p.Type))
			}
		}
		return true
	}
	ctx, cancel := context.WithTimeout(g.ctx, g.cfg.TurnTimeout)
	err := f.Fetch(ctx, msg)
	cancel()
	if err == nil {
		return true
	}
	if g.ctx.Err() != nil {
		s.intakeCut(msg) // shutting down: still journaled, fetched after the restart
		return false
	}
	g.log.Warn("a message's media could not be fetched; the user is told", "session", s.key, "err", err)
	g.reject(msg, rt.Bus, "fetch", err.Error())
	return false
}

// fetcher is the named channel's Fetcher, nil when it has none.
func (g *Gateway) fetcher(name string) channels.Fetcher {
	for _, ch := range g.channels {
		if ch.Name() == name {
			f, _ := ch.(channels.Fetcher)
			return f
		}
	}
	return nil
}

func queueMode(def string, p *profiles.Profile) string {
	if p != nil && profiles.ValidQueueMode(p.QueueMode) {
		return p.QueueMode
	}
	return def
}

// dispatch applies the queue mode to a new turn request.
func (s *session) dispatch(req *turnReq, mode string) {
	if s.running == nil {
		s.pending = append(s.pending, req)
		return
	}
	// The turns waiting behind the running one are bounded like the mailbox: a chat that
	// keeps writing while a long turn runs cannot grow this process without end.
	if len(s.pending) >= s.g.cfg.QueueSize && !(mode == QueueCollect && s.mergeable()) && mode != QueueInterrupt {
		s.refuseTurn(req)
		return
	}
	switch mode {
	case QueueSteer:
		// Media cannot ride a steered message: one with media waits for its own turn.
		if len(req.parts) == 0 && s.agent != nil && s.agent.Steer(req.prompt) {
			s.running.seqs = append(s.running.seqs, req.seqs...)
			req.drop()
			return // the running turn answers it
		}
		s.pending = append(s.pending, req)
	case QueueCollect:
		if s.mergeable() {
			last := s.pending[len(s.pending)-1]
			last.prompt = strings.TrimSpace(last.prompt + "\n\n" + req.prompt)
			last.parts = append(last.parts, req.parts...)
			last.isVoice = last.isVoice || req.isVoice
			resume := last.target.Resume
			last.target = req.target
			if last.target.Resume == "" {
				last.target.Resume = resume
			}
			last.seqs = append(last.seqs, req.seqs...)
			req.drop() // the merged turn runs with the runtime of its first message
			return
		}
		s.pending = append(s.pending, req)
	case QueueInterrupt:
		s.dropPending()
		s.pending = append(s.pending, req)
		s.cancelRunning("interrupted by a newer message")
	default: // followup
		s.pending = append(s.pending, req)
	}
}

// mergeable reports whether a collected message may join the last waiting turn: a plain
// turn that has not yet merged a queue's worth of messages.
func (s *session) mergeable() bool {
	n := len(s.pending)
	if n == 0 {
		return false
	}
	last := s.pending[n-1]
	return !last.compact && last.hookCmd == nil && len(last.seqs) < s.g.cfg.QueueSize
}

// refuseTurn answers a turn that finds the chat's queue full, as Deliver does a message
// that finds the mailbox full.
func (s *session) refuseTurn(req *turnReq) {
	if s.g.metrics != nil {
		s.g.metrics.Rejected.WithLabelValues(req.target.Channel, "queue_full").Inc()
	}
	s.g.log.Warn("message not taken", "session", s.key, "reason",
		fmt.Sprintf("the chat's queue is full (sessions.queue_size: %d); the message was not taken", s.g.cfg.QueueSize))
	bus := s.g.Runtime().Bus
	if req.rt != nil {
		bus = req.rt.Bus
	}
	s.g.notify(s.g.ctx, bus, req.target, "I'm still working through your earlier messages, so I couldn't take this one. Please send it again in a moment.")
	s.g.settle(req.seqs...)
	req.drop()
}

// cancelRunning stops the running turn; its goroutine emits message:cancel on the bus the
// turn started with and reports on turnDone.
func (s *session) cancelRunning(reason string) bool {
	if s.running == nil {
		return false
	}
	s.running.cancel(errCancelled(reason))
	return true
}

// startNext starts the next pending turn when none is running.
func (s *session) startNext() {
	if s.running != nil || len(s.pending) == 0 || s.g.ctx.Err() != nil {
		return // past Stop's deadline nothing new starts: abortAll tells the chat
	}
	req := s.pending[0]
	s.pending[0] = nil
	s.pending = s.pending[1:]
	if len(s.nextTurn) > 0 && !req.compact && req.hookCmd == nil {
		texts := make([]string, 0, len(s.nextTurn)+1)
		for _, n := range s.nextTurn {
			if n.parked && !s.g.intake.Unpark(n.seq) {
				continue // its chat's partition moved: the process holding it now has it
			}
			texts = append(texts, n.text)
			if n.seq != 0 {
				// Saved with the turn's prompt, it leaves the journal with the turn's answer;
				// cut by a crash, the prompt is taken back and it waits for the next turn again.
				req.seqs = append(req.seqs, n.seq)
			}
		}
		req.prompt = strings.TrimSpace(strings.Join(append(texts, req.prompt), "\n\n"))
		s.nextTurn = nil
	}
	if req.prompt == "" && len(req.parts) == 0 && len(req.seqs) == 0 && !req.compact && req.hookCmd == nil {
		// A next_turn's own turn whose text a turn before it took: nothing to ask.
		req.drop()
		s.startNext()
		return
	}
	ctx, cancel := context.WithCancelCause(s.g.ctx)
	s.running = &runningTurn{cancel: cancel, seqs: req.seqs}
	// The turn's snapshot: the agent's bus and the turn's hooks come from the runtime its
	// message was taken with, held until the turn ends, whatever a reload does meanwhile.
	agent, err := s.ensureAgent(req, req.rt)
	s.g.actors.Add(1) // Stop waits for the turn: its chat's loop may be parked meanwhile
	go func() {
		defer s.g.actors.Done()
		defer cancel(nil)
		undelivered := s.runTurn(ctx, req, req.rt, agent, err)
		req.drop()
		s.turnDone <- turnOutcome{cut: errors.Is(context.Cause(ctx), errShutdown), undelivered: undelivered}
		s.g.mu.Lock()
		s.g.wakeLocked(s)
		s.g.mu.Unlock()
	}()
}

// ensureAgent opens the chat's harness session, reopening it when a reload or a different
// binding changed its profile or runtime (history lives in the store, so nothing is lost).
func (s *session) ensureAgent(req *turnReq, rt *Runtime) (*harness.Session, error) {
	if s.agent != nil && s.agentRT == rt && s.agentProfile == req.profile {
		return s.agent, nil
	}
	cfg := mergeLLM(rt.LLM, req.profile.LLM)
	prov, err := s.g.provider(cfg)
	if err != nil {
		return nil, err
	}
	tools, err := sessionTools(rt, s.g.log, req.profile.Name, req.profile.Tools)
	if err != nil {
		return nil, err
	}
	agent, err := harness.OpenSession(harness.SessionOptions{
		Key: s.key, Info: req.info, Store: s.g.store, Provider: prov, Model: cfg.Model,
		System: req.profile.System, Tools: tools, Bus: rt.Bus, Logger: s.g.log,
		MaxRetries: cfg.MaxRetries, Timeout: cfg.Timeout, MaxTokens: cfg.MaxTokens, TextOnly: req.profile.TextOnly,
		ContextWindow: cfg.ContextWindow, IdleReset: req.profile.IdleReset,
		OnUsage: s.g.metrics.usage, OnCompact: s.g.metrics.compaction,
	})
	if err != nil {
		return nil, &historyError{err} // the options were checked: its history failed
	}
	s.agent, s.agentRT, s.agentProfile = agent, rt, req.profile
	return agent, nil
}

// ProfileLLM is the llm section the chats of profile p run with: p's own settings over the
// global ones, as mergeLLM lays them (`gateway check` tells what each profile will send).
func ProfileLLM(global harness.Config, p *profiles.Profile) harness.Config {
	return mergeLLM(global, p.LLM)
}

// mergeLLM overlays a profile's llm settings on the global ones, field by field.
func mergeLLM(base, over harness.Config) harness.Config {
	if over.Provider == "" && base.Provider == "echo" && ((over.Model != "" && over.Model != "echo") || over.BaseURL != "" || over.APIKey != "") {
		// A profile that names a model, a server or a key asks for a model: echo, inherited
		// from a gateway.yaml that configures none, would ignore them. As in gateway.yaml, a
		// section without a provider means the OpenAI-compatible API.
		over.Provider = "openai"
		if over.Model == "" {
			over.Model = harness.DefaultOpenAIModel
		}
	}
	if over.Provider != "" && over.Provider != base.Provider {
		// A different provider does not inherit the global endpoint or key.
		base.BaseURL, base.APIKey, base.Model = "", "", ""
		base.Provider = over.Provider
	}
	if over.Model != "" && over.Model != base.Model {
		// Another model has its own window: the known default, unless the profile says.
		base.Model, base.ContextWindow = over.Model, 0
	}
	if over.ContextWindow > 0 {
		base.ContextWindow = over.ContextWindow
	}
	if over.BaseURL != "" && over.BaseURL != base.BaseURL {
		// The global key was given for the global endpoint: another server (a local Ollama,
		// OpenRouter) is not sent it unless the profile gives a key of its own.
		base.BaseURL, base.APIKey = over.BaseURL, ""
	}
	if over.APIKey != "" {
		base.APIKey = over.APIKey
	}
	if over.Timeout > 0 {
		base.Timeout = over.Timeout
	}
	if over.MaxRetries > 0 {
		base.MaxRetries = over.MaxRetries
	}
	if over.MaxTokens > 0 {
		base.MaxTokens = over.MaxTokens
	}
	return base
}
