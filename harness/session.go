package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gateway/hooks"
	"gateway/internal/llm"
)

// Session defaults.
const (
	defaultMaxTurns = 16
	// maxSteer bounds the messages queued for a running turn.
	maxSteer = 32
)

// Phases of a session (pi's AgentHarness): idle between runs, turn while a run is in
// progress, compaction while the older part of the conversation is summarised (no model
// call of a turn runs then, and nothing is steered into it).
const (
	PhaseIdle    = "idle"
	PhaseTurn    = "turn"
	PhaseCompact = "compaction"
)

// Stats summarises a session for /status.
type Stats struct {
	Messages int // messages on the active branch of the history
	Model    string
	Provider string
	Queued   int       // steered messages waiting for the next save point
	Usage    llm.Usage // tokens reported by the provider since the session was opened
	LastRun  time.Time // when the last run ended (zero if none)
	// ContextTokens is the size of the next request (reported usage plus an estimate) and
	// ContextWindow the model's window, both in tokens.
	ContextTokens int
	ContextWindow int
	// LastCompaction is when the branch was last compacted (zero if never), with the
	// tokens it held before and whether a hook wrote the summary.
	LastCompaction         time.Time
	LastCompactionTokens   int
	LastCompactionFromHook bool
}

// sessionConfig is what a run snapshots when it starts: a SetInfo during a run takes
// effect with the next run.
type sessionConfig struct {
	info        hooks.Session
	provider    Provider
	model       string
	system      string
	tools       []Tool
	bus         *hooks.Bus
	maxRetries  int
	timeout     time.Duration
	toolTimeout time.Duration
	maxTokens   int
	maxTurns    int
	budget      budget
	idleReset   time.Duration
	onUsage     func(provider, model string, u llm.Usage)
	onCompact   func(reason, outcome string)
}

func configFrom(opts SessionOptions) sessionConfig {
	c := sessionConfig{
		info:        opts.Info,
		provider:    opts.Provider,
		model:       opts.Model,
		system:      opts.System,
		tools:       append([]Tool(nil), opts.Tools...),
		bus:         opts.Bus,
		maxRetries:  opts.MaxRetries,
		timeout:     opts.Timeout,
		toolTimeout: opts.ToolTimeout,
		maxTokens:   opts.MaxTokens,
		maxTurns:    opts.MaxTurns,
		idleReset:   opts.IdleReset,
		onUsage:     opts.OnUsage,
		onCompact:   opts.OnCompact,
	}
	if c.info.SessionKey == "" {
		c.info.SessionKey = opts.Key
	}
	if c.provider == nil {
		c.provider = NewEcho()
	}
	switch {
	case c.maxRetries == 0:
		c.maxRetries = defaultMaxRetries
	case c.maxRetries < 0:
		c.maxRetries = 0
	}
	if c.timeout <= 0 {
		c.timeout = defaultTimeout
	}
	if c.toolTimeout <= 0 {
		c.toolTimeout = defaultToolTimeout
	}
	c.budget = newBudget(ContextWindow(c.model, opts.ContextWindow), c.maxTokens)
	c.provider = withMedia(c.provider, opts.TextOnly, c.budget, opts.Logger)
	if c.maxTurns <= 0 {
		c.maxTurns = defaultMaxTurns
	}
	return c
}

// Session is one chat's agent. Run is called by one goroutine at a time; Steer, Abort-by-ctx,
// Stats and SetInfo may be called concurrently with Run.
type Session struct {
	key string
	log *slog.Logger

	// runMu is held for a whole Run or Reset: it makes them exclusive and is what guards
	// hist (only its holder touches the history).
	runMu sync.Mutex
	hist  *history
	count atomic.Int64 // hist.total, readable without runMu

	mu      sync.Mutex
	cfg     sessionConfig
	phase   string
	steer   []string
	usage   llm.Usage
	lastRun time.Time
	ctxUsed int            // the history's tokens, published at save points
	ctxWin  int            // the window they were measured against
	lastCmp compactionInfo // the latest compaction on the branch
}

// OpenSession loads the session's history from the store (repairing a torn last line).
// A nil Store keeps the history in memory only; a nil Provider is the echo provider.
func OpenSession(opts SessionOptions) (*Session, error) {
	if opts.Key == "" {
		return nil, errors.New("session key is empty")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := configFrom(opts)
	// Read apart: decoding the history is deep, and the caller (a chat's actor) then waits.
	h, err := apart(func() (*history, error) {
		return openHistory(opts.Store, opts.Key, 2*cfg.budget.window, newMediaCost(cfg.budget, opts.TextOnly), log)
	})
	if err != nil {
		return nil, err
	}
	s := &Session{key: opts.Key, log: log, hist: h, cfg: cfg, phase: PhaseIdle}
	s.count.Store(int64(h.total))
	s.publish(h, estimateFixed(cfg.system, toolDefs(cfg.tools)), cfg.budget.window)
	return s, nil
}

// publish copies what Stats shows of the history (guarded by runMu) under mu.
func (s *Session) publish(h *history, fixed, window int) {
	used := h.tokens(fixed)
	s.mu.Lock()
	s.ctxUsed, s.ctxWin, s.lastCmp = used, window, h.last
	s.mu.Unlock()
}

func (s *Session) setPhase(p string) {
	s.mu.Lock()
	s.phase = p
	s.mu.Unlock()
}

func toolDefs(tools []Tool) []llm.ToolDef {
	defs := make([]llm.ToolDef, 0, len(tools))
	for _, t := range tools {
		defs = append(defs, t.Def())
	}
	return defs
}

// Key is the session key.
func (s *Session) Key() string { return s.key }

// SetInfo changes the chat identity carried on the events of the next run (the user who
// wrote the message, in a group).
func (s *Session) SetInfo(info hooks.Session) {
	if info.SessionKey == "" {
		info.SessionKey = s.key
	}
	s.mu.Lock()
	s.cfg.info = info
	s.mu.Unlock()
}

// Steer queues text for the running turn: it is injected as a user message at the next
// save point (after the current model call and its tool results) and the run goes on with
// another model call. It reports false when no run is in progress or the queue is full;
// the caller should then run the text as a turn of its own.
func (s *Session) Steer(text string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.phase != PhaseTurn || len(s.steer) >= maxSteer {
		return false
	}
	s.steer = append(s.steer, text)
	return true
}

// Stats summarises the session for /status.
func (s *Session) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{
		Messages: int(s.count.Load()),
		Model:    s.cfg.model,
		Provider: s.cfg.provider.Name(),
		Queued:   len(s.steer),
		Usage:    s.usage,
		LastRun:  s.lastRun,

		ContextTokens:          s.ctxUsed,
		ContextWindow:          s.ctxWin,
		LastCompaction:         s.lastCmp.At,
		LastCompactionTokens:   s.lastCmp.TokensBefore,
		LastCompactionFromHook: s.lastCmp.FromHook,
	}
}

// Reset starts a fresh history (/new), after session_before_reset allows it. The old
// conversation stays in the file; a new root begins. It fails while a run is in progress.
func (s *Session) Reset(ctx context.Context) error {
	if !s.runMu.TryLock() {
		return errors.New("a reply is still in progress; stop it first")
	}
	defer s.runMu.Unlock()
	s.mu.Lock()
	cfg := s.cfg
	s.mu.Unlock()
	if cfg.bus != nil {
		if c := cfg.bus.SessionBefore(ctx, &hooks.SessionBeforeReset{Session: cfg.info}); c != nil {
			reason := c.Reason
			if reason == "" {
				reason = "a hook refused it"
			}
			return fmt.Errorf("the conversation was not reset: %s", reason)
		}
	}
	s.hist.reset()
	s.count.Store(0)
	s.publish(s.hist, estimateFixed(cfg.system, toolDefs(cfg.tools)), cfg.budget.window)
	defer s.hist.release()
	if err := s.hist.flush(); err != nil {
		return fmt.Errorf("the conversation was reset, but saving that failed: %w", &SaveError{err})
	}
	return nil
}

// Entries returns the active branch's entries as hooks see them (the context event's
// entries): the latest compaction, the messages after its cut and the custom entries, in
// the history file's form. It fails while a run is in progress.
func (s *Session) Entries() ([]json.RawMessage, error) {
	if !s.runMu.TryLock() {
		return nil, errors.New("a reply is still in progress")
	}
	defer s.runMu.Unlock()
	return s.hist.branch(), nil
}

// AppendEntries appends custom entries (JSON objects whose "type" the history does not
// use) to the active branch and saves them. The model does not see them; hooks do, in the
// context event. It fails while a run is in progress.
func (s *Session) AppendEntries(entries []json.RawMessage) error {
	if len(entries) == 0 {
		return nil
	}
	if !s.runMu.TryLock() {
		return errors.New("a reply is still in progress")
	}
	defer s.runMu.Unlock()
	if err := s.hist.addCustom(entries); err != nil {
		return err
	}
	defer s.hist.release()
	if err := s.hist.flush(); err != nil {
		return &SaveError{err}
	}
	return nil
}

// SaveError is a change to the conversation that could not be written to its history:
// the server's failure, whose text names its files (the admin's to read, not a chat's).
type SaveError struct{ Err error }

func (e *SaveError) Error() string { return e.Err.Error() }
func (e *SaveError) Unwrap() error { return e.Err }

// Run appends prompt as a user message and runs the agent loop (model call, tools, model
// call, ...) until the model answers without tool calls. Steered messages are injected at
// the next save point. Cancelling ctx aborts: the partial answer is persisted as aborted,
// every tool call gets a result, and Result.Aborted is set (the error is nil). Provider
// failures are retried per the options; the final failure is returned as an error whose
// text is fit to show a user. on may be nil.
func (s *Session) Run(ctx context.Context, prompt string, on func(Update)) (Result, error) {
	return s.RunWith(ctx, prompt, nil, on)
}

// RunWith is Run with media the user sent beside the prompt (images, documents), kept in
// the history by path and given to the model as its provider takes them.
func (s *Session) RunWith(ctx context.Context, prompt string, parts []llm.Part, on func(Update)) (Result, error) {
	return s.RunAttempt(ctx, Attempt{}, prompt, parts, on)
}

// Attempt names the user message a run answers, so that a message answered again after a
// crash is asked of the model once.
type Attempt struct {
	// ID is kept with the prompt's history entry (its intakeId); "" for none.
	ID string
	// Again says an earlier run may have started on this same message and been cut by a
	// crash before its answer was delivered: its prompt, and what followed it, may be on
	// the branch already.
	Again bool
}

// RunAttempt is RunWith for the message a names. With a.Again, a user message of the same
// ID on the active branch (an earlier attempt, cut) is taken back first with what followed
// it, by a branch move: the model is asked the message once, as the first time, not once
// per attempt. When that attempt saved a tool step, the run goes on from it instead, so that
// no tool runs twice: see resume.
func (s *Session) RunAttempt(ctx context.Context, a Attempt, prompt string, parts []llm.Part, on func(Update)) (Result, error) {
	if !s.runMu.TryLock() {
		return Result{}, errors.New("a reply is already in progress in this chat")
	}
	defer s.runMu.Unlock()
	r := s.newRun(ctx, parts, on)
	r.asked = a
	defer s.hist.release()
	res, err := r.exec(prompt)
	r.finish(res, err)
	return res, err
}

// newRun enters the turn phase with a snapshot of the config. It is a function of its own,
// as are the steps of exec, so that the frames under a model call stay small: the turn's
// goroutine waits there for the whole call, with every frame below it on its stack, and
// kept under 8 KB that stack is not doubled to 16 KB (see TestWaitingTurnHoldsASmallStack).
func (s *Session) newRun(ctx context.Context, parts []llm.Part, on func(Update)) *run {
	s.mu.Lock()
	cfg := s.cfg // the turn snapshot
	s.phase = PhaseTurn
	s.mu.Unlock()
	if on == nil {
		on = func(Update) {}
	}
	return &run{s: s, cfg: cfg, ctx: ctx, on: on, phase: PhaseTurn, parts: parts}
}

// run is the state of one Run (or of one Compact).
type run struct {
	s     *Session
	cfg   sessionConfig
	ctx   context.Context
	on    func(Update)
	phase string // the phase to return to after a compaction
	// ceiling is the estimate of a request the provider found too long (0: none): the
	// summary request is kept well below it.
	ceiling int
	parts   []llm.Part // media of the prompt
	asked   Attempt    // the message the prompt is
	// prompt is the id of the prompt's history entry, once it is on the branch: a
	// compaction during the run summarises only what came before it (see compact).
	prompt string
	// refused is set when the compaction before the prompt failed or was cancelled: the
	// first call does not ask again (a provider that is down would be waited for twice).
	refused bool
	// final is set for the call after the steps are spent (lastStep).
	final bool
	// cut are the calls of the resumed tool step a crash left without a result (resume):
	// start gives each its interruptedResult, through the tool_result hook, without running it.
	cut []llm.ToolCall
}

// fixed is what the system prompt and the tools cost in every request.
func (r *run) fixed(system string) int { return estimateFixed(system, toolDefs(r.cfg.tools)) }

// evCtx is the context for events: after an abort, the closing events still reach hooks.
func (r *run) evCtx() context.Context {
	if r.ctx.Err() != nil {
		return context.WithoutCancel(r.ctx)
	}
	return r.ctx
}

func (r *run) emit(ev hooks.Event) {
	if r.cfg.bus != nil {
		r.cfg.bus.Emit(r.evCtx(), ev)
	}
}

func (r *run) add(m llm.Message, aborted bool) {
	r.s.hist.add(m, aborted)
	r.s.count.Store(int64(r.s.hist.total))
}

// save is a save point: pending history entries become durable. A failed write is logged
// and retried at the next save point; the conversation goes on.
func (r *run) save() { r.saved(r.s.hist.flush()) }

// saveSynced is a save point synced before it returns (flushSynced), for a step whose
// tools run next.
func (r *run) saveSynced() { r.saved(r.s.hist.flushSynced()) }

func (r *run) saved(err error) {
	if err != nil {
		r.s.log.Error("saving the conversation failed", "key", r.s.key, "err", err)
	}
}

func (r *run) exec(prompt string) (Result, error) {
	system := r.start(prompt)
	defs := toolDefs(r.cfg.tools)
	fixed := estimateFixed(system, defs)
	var last string
	for turn := 1; turn <= r.cfg.maxTurns; turn++ {
		if r.ctx.Err() != nil {
			return Result{Text: last, Aborted: true}, nil
		}
		resp, partial, full, err := r.callWithBudget(turn, system, defs, fixed)
		if err != nil {
			return r.failedStep(turn, partial, last, err)
		}
		var end, aborted bool
		if last, end, aborted = r.answered(turn, resp, full, fixed); end {
			res := Result{Text: last, Aborted: aborted}
			if !aborted {
				res.Ended = ending(last, resp.StopReason)
			}
			return res, nil
		}
	}
	return r.lastStep(r.cfg.maxTurns+1, system, defs, fixed, last)
}

// lastAsk closes the request of the last step, after the steps are spent; it is not kept
// in the history, where the answer follows the steps as any answer does.
const lastAsk = "You have used all the steps you may take for this message, so you cannot call tools any more. " +
	"Answer the user now with what you have found so far, and say briefly what is left undone, if anything."

// lastStep is one more model call once the steps are spent, with the tools listed but not
// to be called, and the run ends with its answer: after many steps of work the user gets
// what the model found, not an error. When that call fails, or the model still says
// nothing, the run fails as it did before.
func (r *run) lastStep(turn int, system string, defs []llm.ToolDef, fixed int, last string) (Result, error) {
	if r.ctx.Err() != nil {
		return Result{Text: last, Aborted: true}, nil
	}
	r.final = true
	resp, partial, full, err := r.callWithBudget(turn, system, defs, fixed+estimateText(lastAsk)+perMessageTokens)
	if err == nil {
		// A server that ignores tool_choice may still call tools: nothing runs them now.
		resp.Message.ToolCalls = nil
		if strings.TrimSpace(resp.Message.Content) == "" {
			err = errors.New("the model answered with no text")
		}
	}
	if err != nil {
		r.s.log.Warn("the model gave no answer after its last step", "key", r.s.key, "steps", r.cfg.maxTurns, "err", err)
		res, ferr := r.failedStep(turn, partial, last, err)
		if ferr == nil {
			return res, nil // aborted
		}
		if partial == "" {
			res.Text = last
		}
		return res, tooManySteps(r.cfg.maxTurns)
	}
	text, _, aborted := r.answered(turn, resp, full, fixed)
	res := Result{Text: text, Aborted: aborted}
	if !aborted {
		res.Ended = ending(text, resp.StopReason)
	}
	return res, nil
}

// ending says why a final answer ends as it does: it reached the length limit (OpenAI's
// "length", Anthropic's "max_tokens"), the provider withheld it ("content_filter",
// "refusal"), or the model said nothing. Without it the chat showed a cut answer, or
// nothing at all, as if that were the whole of it.
func ending(text, reason string) Ending {
	switch reason {
	case "length", "max_tokens":
		return EndedAtLength
	case "content_filter", "refusal":
		return EndedWithheld
	}
	if strings.TrimSpace(text) == "" {
		return EndedEmpty
	}
	return EndedWhole
}

func tooManySteps(n int) error {
	return fmt.Errorf("The assistant stopped after %d steps without a final answer. Please try again or ask differently.", n)
}

// start adds the prompt and what before_agent_start injects, emits agent_start and
// returns the system prompt of the run.
func (r *run) start(prompt string) string {
	info := r.cfg.info
	resumed := r.asked.Again && r.asked.ID != "" && r.resume()
	if !resumed {
		r.ask(prompt)
	}

	system := r.cfg.system
	if r.cfg.bus != nil {
		var inject []llm.Message
		system, inject = r.cfg.bus.BeforeAgentStart(r.ctx, &hooks.BeforeAgentStart{Session: info, Prompt: prompt, SystemPrompt: system})
		if resumed {
			inject = nil // the earlier attempt's are on the branch
		}
		for _, m := range inject {
			// Injected messages add context; they cannot fake tool traffic.
			if m.Role == llm.RoleTool || len(m.ToolCalls) > 0 {
				r.s.log.Warn("ignoring an injected message with tool traffic", "key", r.s.key)
				continue
			}
			r.add(m, false)
		}
	}
	// The prompt is saved with the model's answer at the first save point (or by finish
	// if the call fails): one fsync per simple turn, not two. A crash during the model
	// call leaves no unanswered prompt in the history, just as the chat got no answer.
	r.emit(&hooks.AgentStart{Session: info, Prompt: prompt})
	// After agent_start, as a run's tool results are: hooks see the run begin first.
	for _, tc := range r.cut {
		r.add(r.tool(tc, interruptedResult), false)
		r.save()
	}
	return system
}

// ask adds the prompt to the history, in place of an earlier attempt at the same message
// that a crash cut before it saved a tool step (with nothing done, the message is asked
// again as the first time).
func (r *run) ask(prompt string) {
	if r.asked.Again && r.asked.ID != "" && r.s.hist.takeBack(r.asked.ID) {
		r.s.log.Info("a message cut by a restart is asked again in place of its earlier attempt", "key", r.s.key)
		r.s.count.Store(int64(r.s.hist.total))
	}
	r.idleReset()
	msg := llm.Message{Role: llm.RoleUser, Content: prompt, Parts: r.parts}
	if r.s.hist.takeBackResent(msg) {
		r.s.log.Info("a message sent again after it got no answer replaces its unanswered copy", "key", r.s.key)
	}
	r.compactAhead(msg)
	r.s.hist.addAs(msg, false, r.asked.ID)
	r.prompt = r.s.hist.leaf
	r.s.count.Store(int64(r.s.hist.total))
}

// interruptedResult is what the model is told of a tool call a crash cut: the call was
// saved, its result was not, so the tool may have done its work (sent the mail, opened the
// ticket) or not. Running it again blindly could do that work twice.
const interruptedResult = "error: this call was interrupted by a restart of the gateway before its result was saved, " +
	"so its outcome is unknown: the tool may or may not have done what was asked. " +
	"If that matters, check before calling it again, and tell the user."

// resume goes on with the message the run answers again after a crash, when the earlier
// attempt saved a tool step: the history is the truth, so no call of it runs again. A saved
// result is used as it is; a call saved without its result gets one saying it was
// interrupted and its outcome is unknown (interruptedResult, given by start through tool, as
// any result is, so that tool_result hooks and the chat see it); an answer in words after the
// step, which has no effect but the words, is taken back and asked again, as is a message
// cut before any step. It reports false when the message has no tool step on the branch:
// then the message is asked again from the start (ask).
func (r *run) resume() bool {
	h := r.s.hist
	i := slices.IndexFunc(h.entries, func(e entry) bool { return e.intake == r.asked.ID && e.msg.Role == llm.RoleUser })
	if i < 0 || slices.ContainsFunc(h.entries[i+1:], func(e entry) bool { return e.intake != "" }) {
		return false // not the branch's last attempt: later messages were answered after it
	}
	r.prompt = h.entries[i].id
	// A message steered into the attempt (a user message after its first answer) has its
	// own journal entry and is asked again as a turn of its own after this one: the
	// attempt goes on from before it, or the model would read it twice.
	if a := slices.IndexFunc(h.entries[i+1:], func(e entry) bool { return e.msg.Role == llm.RoleAssistant }); a >= 0 {
		a += i + 1
		if u := slices.IndexFunc(h.entries[a:], func(e entry) bool { return e.msg.Role == llm.RoleUser }); u >= 0 && !h.takeBackAt(a+u) {
			return false
		}
	}
	step := -1
	for j := len(h.entries) - 1; j > i; j-- {
		if m := h.entries[j].msg; m.Role == llm.RoleAssistant && len(m.ToolCalls) > 0 {
			step = j
			break
		}
	}
	if step < 0 {
		return false
	}
	n := len(h.entries)
	for n-1 > step && h.entries[n-1].msg.Role == llm.RoleAssistant {
		n--
	}
	if n < len(h.entries) {
		h.takeBackAt(n)
	}
	calls := h.entries[step].msg.ToolCalls
	for _, tc := range calls {
		if slices.ContainsFunc(h.entries[step+1:], func(e entry) bool { return e.msg.Role == llm.RoleTool && e.msg.ToolCallID == tc.ID }) {
			continue
		}
		r.s.log.Warn("a tool call was cut by a restart; it is not run again, and the model is told its outcome is unknown",
			"key", r.s.key, "tool", tc.Name, "call", tc.ID)
		r.cut = append(r.cut, tc)
	}
	r.s.count.Store(int64(h.total))
	r.save()
	r.s.log.Info("a message cut by a restart goes on from its saved tool step", "key", r.s.key)
	return true
}

// compactAhead compacts before the prompt m joins the history when with it the request
// would pass the threshold. The compaction then stands before the message on the branch,
// so that the message, cut by a crash and answered again, is taken back (takeBack) by a
// plain branch move: compacted after it, taking it back writes the compaction again.
func (r *run) compactAhead(m llm.Message) {
	fixed := r.fixed(r.cfg.system)
	if r.s.hist.tokens(fixed)+estimateMessage(m, r.s.hist.cost) > r.cfg.budget.threshold {
		// A failure is handled as in limit: the oldest turns are left out of the request.
		_, err := r.compact(hooks.CompactThreshold, "", fixed)
		r.refused = err != nil && !errors.Is(err, ErrNothingToCompact)
	}
}

// failedStep ends the run after a failed model call; last is the text of the steps before.
func (r *run) failedStep(turn int, partial, last string, err error) (Result, error) {
	info := r.cfg.info
	aborted := r.ctx.Err() != nil
	var msg llm.Message
	if partial != "" {
		// What the chat already showed stays in the history, marked aborted.
		msg = llm.Message{Role: llm.RoleAssistant, Content: partial}
		r.add(msg, true)
		r.save()
		r.emit(&hooks.MessageEnd{Session: info, Message: msg})
	}
	r.emit(&hooks.TurnEnd{Session: info, Turn: turn, Message: msg})
	if aborted {
		if partial != "" {
			last = partial
		}
		return Result{Text: last, Aborted: true}, nil
	}
	return Result{Text: partial}, err
}

// answered takes a step's answer: it is saved, its tool calls run and steered messages
// join. It returns the step's text, and end when the run ends with it (aborted: by ctx)
// rather than going on with another step (tool results, steered messages).
func (r *run) answered(turn int, resp *Response, full bool, fixed int) (last string, end, aborted bool) {
	info := r.cfg.info
	msg := resp.Message
	msg.Role = llm.RoleAssistant
	bad := badArguments(msg.ToolCalls)
	msg.ToolCalls = cleanToolCalls(msg.ToolCalls)
	r.add(msg, false)
	if h := r.s.hist; full && resp.Usage.InputTokens > 0 {
		h.reported, h.reportedAt = resp.Usage.InputTokens+resp.Usage.OutputTokens, len(h.entries)
	}
	if len(msg.ToolCalls) > 0 {
		r.saveSynced()
	} else {
		r.save()
	}
	r.s.publish(r.s.hist, fixed, r.cfg.budget.window)
	r.emit(&hooks.MessageEnd{Session: info, Message: msg})
	last = msg.Content

	var results []llm.Message
	for i, tc := range msg.ToolCalls {
		var untried string
		if bad[i] {
			untried = badArgsResult
		}
		res := r.tool(tc, untried)
		r.add(res, false)
		// Saved at once: after a crash, a call whose result is saved is not run again
		// (resume), and the next call of the step may be the one the crash cuts.
		r.save()
		results = append(results, res)
	}
	r.emit(&hooks.TurnEnd{Session: info, Turn: turn, Message: msg, Results: results})
	if r.ctx.Err() != nil {
		return last, true, true
	}

	// Save point: steered messages join the conversation here. Checking the queue and
	// leaving the turn phase happen under one lock, so a Steer either lands here or is
	// refused (and the caller runs it as its own turn).
	r.s.mu.Lock()
	steer := r.s.steer
	r.s.steer = nil
	if len(steer) == 0 && len(msg.ToolCalls) == 0 {
		r.s.phase = PhaseIdle
	}
	r.s.mu.Unlock()
	for _, t := range steer {
		r.add(llm.Message{Role: llm.RoleUser, Content: t}, false)
	}
	if len(steer) > 0 {
		r.save()
		return last, false, false
	}
	return last, len(msg.ToolCalls) == 0, false
}

// finish leaves the turn phase, keeps steered messages that were accepted but not yet
// delivered (they become user messages for the next run), and emits agent_end.
func (r *run) finish(res Result, err error) {
	r.s.mu.Lock()
	left := r.s.steer
	r.s.steer = nil
	r.s.phase = PhaseIdle
	r.s.mu.Unlock()
	for _, t := range left {
		r.add(llm.Message{Role: llm.RoleUser, Content: t}, false)
	}
	r.save()
	r.s.publish(r.s.hist, r.fixed(r.cfg.system), r.cfg.budget.window)
	end := &hooks.AgentEnd{Session: r.cfg.info, Response: res.Text, Aborted: res.Aborted}
	if err != nil {
		end.Error = err.Error()
	}
	r.emit(end)
}

// request builds the provider request after before_provider_request had its say.
func (r *run) request(system string, msgs []llm.Message, defs []llm.ToolDef) *Request {
	req := &Request{
		RequestID: newID(),
		Model:     r.cfg.model,
		System:    system,
		Messages:  msgs,
		Tools:     defs,
		MaxTokens: r.cfg.maxTokens,
	}
	bus, info := r.cfg.bus, r.cfg.info
	if bus == nil {
		return req
	}
	opts := bus.BeforeProviderRequest(r.ctx, &hooks.BeforeProviderRequest{Session: info, RequestID: req.RequestID,
		Options: hooks.ProviderOptions{Provider: r.cfg.provider.Name(), Model: req.Model, MaxTokens: req.MaxTokens}})
	// The provider itself cannot change within a run; model and limits can.
	if opts.Model != "" {
		req.Model = opts.Model
	}
	req.MaxTokens = opts.MaxTokens
	req.Temperature = opts.Temperature
	id := req.RequestID
	req.Payload = func(body json.RawMessage) json.RawMessage {
		return bus.BeforeProviderPayload(r.ctx, &hooks.BeforeProviderPayload{Session: info, RequestID: id, Payload: body})
	}
	req.OnResponse = func(status int, h http.Header) {
		r.emit(&hooks.AfterProviderResponse{Session: info, RequestID: id, Status: status, Headers: flattenHeaders(h)})
	}
	return req
}

// callWithBudget makes the turn's model call with the conversation as it fits the budget:
// past the threshold it compacts first; when a hook cancels (or the compaction fails) the
// oldest turns are left out of the request instead. A provider answer that the context is
// too long triggers one compaction and one retry. full tells whether the request carried
// the whole context (so that the reported usage measures it).
func (r *run) callWithBudget(turn int, system string, defs []llm.ToolDef, fixed int) (resp *Response, partial string, full bool, err error) {
	limit := r.limit(fixed)
	for attempt := 1; ; attempt++ {
		req, start := r.prepare(turn, attempt, system, defs, fixed, limit)
		full = start == 0
		resp, partial, err = r.call(req, r.streamDelta)
		if err == nil || attempt > 1 || !isOverflow(err) || r.ctx.Err() != nil {
			var pe *ProviderError
			if attempt > 1 && turn == 1 && start >= lastUser(r.s.hist.entries) && errors.As(err, &pe) && pe.Overflow {
				pe.Alone = true // the retry held only the prompt (and the summary)
			}
			return resp, partial, full, err
		}
		limit = r.overflowed(fixed, start)
	}
}

// limit compacts the history when it passed the threshold and returns the most the
// request may hold, in our estimate's terms.
func (r *run) limit(fixed int) int {
	h, b := r.s.hist, r.cfg.budget
	if h.tokens(fixed) > b.threshold && !r.refused {
		r.compact(hooks.CompactThreshold, "", fixed)
	}
	r.refused = false
	limit := b.threshold
	if est, real := fixed+h.tokensFrom(0), h.tokens(fixed); real > est {
		// The provider counts more than our estimate: measure the cut in its terms.
		limit = int(int64(limit) * int64(est) / int64(real))
	}
	return limit
}

// prepare is the request of one attempt: the history from start on (0 unless it must be
// cut to fit under limit), through the context hooks.
func (r *run) prepare(turn, attempt int, system string, defs []llm.ToolDef, fixed, limit int) (req *Request, start int) {
	h := r.s.hist
	p := -1 // the prompt's entry, when the cut leaves it out
	if fixed+h.tokensFrom(0) > limit {
		// Still too long (compaction refused or failed, or this run alone is too long):
		// drop the oldest turns.
		room := limit - fixed - h.tokensFrom(len(h.entries))
		start = max(cutPoint(h.entries, max(room, 1)), 0)
		if p = slices.IndexFunc(h.entries, func(e entry) bool { return e.id == r.prompt }); r.prompt == "" || p < 0 || p >= start {
			p = -1
		} else {
			// The run's own steps are cut: its message still leads them, or the model would
			// work on without knowing what for.
			start = max(cutPoint(h.entries, max(room-h.entries[p].tokens, 1)), p+1)
		}
	}
	msgs := h.context(start)
	if p >= 0 {
		at := 0
		if h.summary != "" {
			at = 1
		}
		msgs = slices.Insert(msgs[:len(msgs):len(msgs)], at, h.entries[p].msg)
	}
	if r.cfg.bus != nil {
		ev := &hooks.Context{Session: r.cfg.info, Messages: msgs}
		if r.cfg.bus.Has(hooks.NameContext) {
			ev.Entries = h.branch()
		}
		// A hook's list is repaired as the history is: one that keeps the newest messages
		// may cut between a call and its result, which the APIs refuse.
		msgs = repair(r.cfg.bus.Context(r.ctx, ev))
	}
	if r.final {
		msgs = append(msgs[:len(msgs):len(msgs)], llm.Message{Role: llm.RoleUser, Content: lastAsk})
	}
	req = r.request(system, msgs, defs)
	req.NoToolCalls = r.final
	if attempt == 1 {
		r.emit(&hooks.TurnStart{Session: r.cfg.info, Turn: turn})
	}
	return req, start
}

// overflowed compacts after the model found the request (the history from start on) too
// long, and returns the limit of the retry.
func (r *run) overflowed(fixed, start int) (limit int) {
	h := r.s.hist
	r.s.log.Info("the model says the context is too long; compacting and retrying once", "key", r.s.key)
	sent := fixed + h.tokensFrom(start)
	r.ceiling = sent
	_, cerr := r.compact(hooks.CompactOverflow, "", fixed)
	// Our estimate fell short of the provider's count: send clearly less than before.
	limit = min(r.cfg.budget.threshold, sent/2)
	if cerr == nil && fixed+h.tokensFrom(0) <= limit {
		return limit
	}
	return max(limit, fixed+h.tokensFrom(len(h.entries))+1)
}

// streamDelta shows a piece of the answer in the chat and to message_update hooks.
func (r *run) streamDelta(d string) {
	r.on(Update{Kind: UpdateDelta, Text: d})
	if r.cfg.bus != nil {
		r.cfg.bus.Emit(r.ctx, &hooks.MessageUpdate{Session: r.cfg.info, Delta: d})
	}
}

// call runs one model call with retries; show (may be nil) sees each streamed piece. It
// returns the text streamed so far with any failure; once text has been streamed a failure
// is not retried (the chat already shows it).
func (r *run) call(req *Request, show func(string)) (*Response, string, error) {
	partial := &strings.Builder{}
	onDelta := func(d string) {
		partial.WriteString(d)
		if show != nil {
			show(d)
		}
	}
	for attempt := 1; ; attempt++ {
		resp, err := r.attempt(req, onDelta)
		if err == nil {
			return r.took(req, resp, partial.String()), partial.String(), nil
		}
		if err = r.retry(attempt, err, partial.Len() > 0); err != nil {
			return nil, partial.String(), err
		}
	}
}

// attempt is one call of the provider, ended by a silence of the call's timeout.
func (r *run) attempt(req *Request, onDelta func(string)) (*Response, error) {
	ctx, cancel := withIdle(r.ctx, r.cfg.timeout)
	defer cancel()
	return r.cfg.provider.Stream(ctx, req, onDelta)
}

// took counts a successful call's usage; a provider that streamed text without a
// response gets one made of that text.
func (r *run) took(req *Request, resp *Response, partial string) *Response {
	p := r.cfg.provider
	if resp == nil {
		resp = &Response{Message: llm.Message{Role: llm.RoleAssistant, Content: partial}}
	}
	r.s.mu.Lock()
	r.s.usage.InputTokens += resp.Usage.InputTokens
	r.s.usage.OutputTokens += resp.Usage.OutputTokens
	r.s.mu.Unlock()
	if r.cfg.onUsage != nil {
		r.cfg.onUsage(p.Name(), req.Model, resp.Usage)
	}
	return resp
}

// retry decides on a failed attempt: nil after waiting out the backoff when another
// attempt follows, else the error the call ends with (midway: the chat already has text
// of this call, which is never repeated).
func (r *run) retry(attempt int, err error, midway bool) error {
	p := r.cfg.provider
	if r.ctx.Err() != nil {
		return r.ctx.Err()
	}
	var re *RetryableError
	retryable := errors.As(err, &re)
	if !retryable && errors.Is(err, context.DeadlineExceeded) {
		// The call's own timeout, not surfaced by the provider as retryable.
		retryable = true
		err = &ProviderError{Provider: p.Name(), Timeout: true, Err: err}
	}
	pe := providerError(p.Name(), err)
	pe.Attempts = attempt
	if midway {
		pe.Midway = true
		return pe
	}
	if !retryable || attempt >= r.cfg.maxRetries+1 {
		r.s.log.Warn("model call failed", "key", r.s.key, "provider", p.Name(), "attempts", attempt, "err", pe.Err)
		return pe
	}
	var serverWait time.Duration
	if re != nil {
		serverWait = re.RetryAfter
	}
	wait := retryWait(attempt, serverWait, rand.Float64)
	r.on(Update{Kind: UpdateStatus, Text: pe.RetryStatus(wait)})
	r.s.log.Info("model call failed; retrying", "key", r.s.key, "provider", p.Name(), "attempt", attempt, "wait", wait, "err", pe.Err)
	if sleepCtx(r.ctx, wait) != nil {
		return r.ctx.Err()
	}
	return nil
}

// providerError finds the *ProviderError in err, copied so that a shared error value is
// never changed, or wraps err in a new one.
func providerError(name string, err error) *ProviderError {
	var pe *ProviderError
	if errors.As(err, &pe) {
		cp := *pe
		return &cp
	}
	return &ProviderError{Provider: name, Err: err}
}

// badArgsResult is what the model is told of a call whose arguments are not JSON, so it
// can call again.
const badArgsResult = "error: the arguments of this call are not valid JSON, so the tool did not run; call it again with a JSON object"

// tool runs one tool call through the tool_call and tool_result hooks. Every call gets a
// result, so the history never holds a call without one. With untried set (badArgsResult,
// interruptedResult) the tool is not run, nor asked of tool_call: untried is its error
// result, which tool_result hooks see and may change as any other.
func (r *run) tool(tc llm.ToolCall, untried string) llm.Message {
	info, bus := r.cfg.info, r.cfg.bus
	r.on(Update{Kind: UpdateToolStart, ToolID: tc.ID, ToolName: tc.Name})
	args := tc.Arguments
	var (
		content string
		isErr   bool
		done    bool
	)
	switch {
	case untried != "":
		// First: a cut call's outcome is unknown even when this run is stopped too.
		content, isErr, done = untried, true, true
	case r.ctx.Err() != nil:
		content, isErr, done = "error: the run was stopped before this tool ran", true, true
	}
	if !done && bus != nil {
		ev := &hooks.ToolCall{Session: info, ToolCallID: tc.ID, Tool: tc.Name, Arguments: args}
		if b := bus.ToolCall(r.ctx, ev); b != nil {
			reason := b.Reason
			if reason == "" {
				reason = "a hook refused this tool call"
			}
			content, isErr, done = reason, true, true
		} else {
			args = ev.Arguments
		}
	}
	if !done {
		var t Tool
		for _, x := range r.cfg.tools {
			if x.Def().Name == tc.Name {
				t = x
				break
			}
		}
		if t == nil {
			content, isErr = fmt.Sprintf("error: there is no tool named %q", tc.Name), true
		} else {
			ctx := context.WithValue(r.ctx, callKey{}, ToolCallInfo{ID: tc.ID, Session: info})
			content, isErr = runTool(ctx, t, args, r.cfg.toolTimeout)
		}
	}
	if bus != nil {
		ev := &hooks.ToolResult{Session: info, ToolCallID: tc.ID, Tool: tc.Name, Arguments: args, Content: content, IsError: isErr}
		bus.ToolResult(r.evCtx(), ev)
		content, isErr = clip(ev.Content, maxToolOutput), ev.IsError
	}
	if limit := documentBytes(r.cfg.budget); len(content) > limit {
		// A small window cannot take a long output whole: sent whole it would be refused as
		// a conversation too long, which no compaction mends (a call keeps its result).
		content = clip(content, limit) + fmt.Sprintf("\n[the rest of the tool's output is cut: only its first %s are shown]", humanSize(int64(limit)))
	}
	r.on(Update{Kind: UpdateToolEnd, ToolID: tc.ID, ToolName: tc.Name, IsError: isErr, Text: clip(content, 200)})
	return llm.Message{Role: llm.RoleTool, Content: content, ToolCallID: tc.ID, Name: tc.Name, IsError: isErr}
}

// badArguments tells, call by call, whether the arguments the model sent are not JSON.
func badArguments(calls []llm.ToolCall) []bool {
	bad := make([]bool, len(calls))
	for i, c := range calls {
		bad[i] = len(bytes.TrimSpace(c.Arguments)) > 0 && !json.Valid(c.Arguments)
	}
	return bad
}

// cleanToolCalls gives every call a unique id and valid JSON arguments.
func cleanToolCalls(calls []llm.ToolCall) []llm.ToolCall {
	if len(calls) == 0 {
		return nil
	}
	out := make([]llm.ToolCall, 0, len(calls))
	seen := make(map[string]bool, len(calls))
	for _, c := range calls {
		if c.ID == "" || seen[c.ID] {
			c.ID = "call_" + newID()
		}
		seen[c.ID] = true
		c.Arguments = argsOrEmpty(c.Arguments)
		out = append(out, c)
	}
	return out
}

// repair drops tool results that do not follow their call and adds an error result for
// every call left without one (e.g. after a crash between the two save points). A valid
// sequence is returned as it is.
func repair(msgs []llm.Message) []llm.Message {
	if valid(msgs) {
		return msgs
	}
	out := make([]llm.Message, 0, len(msgs))
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		switch {
		case m.Role == llm.RoleTool:
			continue // orphan
		case m.Role == llm.RoleAssistant && len(m.ToolCalls) > 0:
			out = append(out, m)
			first := len(out)
			j := i + 1
			for ; j < len(msgs) && msgs[j].Role == llm.RoleTool; j++ {
				if callIndex(m.ToolCalls, msgs[j].ToolCallID) >= 0 && !answered(out[first:], msgs[j].ToolCallID) {
					out = append(out, msgs[j])
				}
			}
			for _, tc := range m.ToolCalls {
				if !answered(out[first:], tc.ID) {
					out = append(out, llm.Message{Role: llm.RoleTool, ToolCallID: tc.ID, Name: tc.Name, IsError: true,
						Content: "error: no result was recorded for this call"})
				}
			}
			i = j - 1
		default:
			out = append(out, m)
		}
	}
	return out
}

// valid reports whether every tool call is directly followed by its results, in order, and
// no tool result stands anywhere else (the form the harness writes).
func valid(msgs []llm.Message) bool {
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		if m.Role == llm.RoleTool {
			return false
		}
		if m.Role != llm.RoleAssistant || len(m.ToolCalls) == 0 {
			continue
		}
		for k, tc := range m.ToolCalls {
			j := i + 1 + k
			if j >= len(msgs) || msgs[j].Role != llm.RoleTool || msgs[j].ToolCallID != tc.ID {
				return false
			}
		}
		i += len(m.ToolCalls)
	}
	return true
}

func callIndex(calls []llm.ToolCall, id string) int {
	for i, c := range calls {
		if c.ID == id {
			return i
		}
	}
	return -1
}

func answered(results []llm.Message, id string) bool {
	for _, m := range results {
		if m.ToolCallID == id {
			return true
		}
	}
	return false
}

// flattenHeaders keeps the first value of each response header, bounded, for hooks.
func flattenHeaders(h http.Header) map[string]string {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]string, min(len(h), 64))
	for k, v := range h {
		if len(out) >= 64 {
			break
		}
		if len(v) == 0 || strings.EqualFold(k, "Set-Cookie") {
			continue
		}
		out[k] = clip(v[0], 256)
	}
	return out
}
