package harness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gateway/hooks"
	"gateway/internal/llm"
)

// Compaction: when the next request would pass the budget's threshold, the older part of
// the branch is summarised by the session's model and a compaction entry is appended; the
// model then sees the summary and the recent messages, kept verbatim. The cut never falls
// between a tool call and its results.

const (
	summaryPrefix = "The conversation so far was long, so its older part was summarised. Summary of the earlier conversation:\n\n<summary>\n"
	summarySuffix = "\n</summary>"
	// summaryOverhead is the cost of the wrapping around a summary.
	summaryOverhead = (len(summaryPrefix)+len(summarySuffix))/4 + perMessageTokens

	summarySystem = "You write summaries of conversations between a user and an AI assistant, so that the assistant " +
		"can go on with the conversation without its earlier messages. Do not continue the conversation and do not " +
		"answer questions in it: only summarise."
	summaryAsk = "Summarise the conversation below. Keep what the assistant needs to go on: the user's goals and " +
		"preferences, decisions and facts established, names, numbers, dates, files and tool results that still " +
		"matter, open questions and what was being worked on last. Be concise; use short bullet points."

	// Per-message limits of the text handed to the summariser.
	maxSummaryToolText = 2000
	maxSummaryText     = 8000
)

// ErrNothingToCompact is returned by Compact when the conversation is too short to summarise.
var ErrNothingToCompact = errors.New("there is nothing to compact yet: the conversation is short")

// CompactCancelledError is returned when a session_before_compact hook cancelled.
type CompactCancelledError struct{ Reason string }

func (e *CompactCancelledError) Error() string {
	if e.Reason == "" {
		return "a hook refused to compact this conversation"
	}
	return "a hook refused to compact this conversation: " + e.Reason
}

// CompactResult describes a compaction.
type CompactResult struct {
	TokensBefore int
	TokensAfter  int // an estimate
	Summarised   int // messages folded into the summary
	FromHook     bool
}

// summaryMessage is how the model sees a summary: a user message before the kept ones.
func summaryMessage(summary string) llm.Message {
	return llm.Message{Role: llm.RoleUser, Content: summaryPrefix + summary + summarySuffix}
}

// cutPoint returns the index of the first entry to keep so that the entries from there on
// cost at most keep tokens (the newest entry is always kept). The cut falls on a user
// message when one is in reach, else on an assistant message, never on a tool result, so
// a tool call stays with its results. 0 means nothing is cut.
func cutPoint(entries []entry, keep int) int {
	n := len(entries)
	if n == 0 {
		return 0
	}
	i, acc := n-1, entries[n-1].tokens
	for i > 0 && acc+entries[i-1].tokens <= keep {
		i--
		acc += entries[i].tokens
	}
	for j := i; j < n; j++ {
		if entries[j].msg.Role == llm.RoleUser {
			return j
		}
	}
	for j := i; j < n; j++ {
		if entries[j].msg.Role != llm.RoleTool {
			return j
		}
	}
	for j := i; j > 0; j-- {
		if entries[j].msg.Role != llm.RoleTool {
			return j
		}
	}
	return 0
}

// lastUser is the index of the latest user message, 0 when there is none.
func lastUser(entries []entry) int {
	for j := len(entries) - 1; j > 0; j-- {
		if entries[j].msg.Role == llm.RoleUser {
			return j
		}
	}
	return 0
}

// serialize writes messages as plain text for the summariser, so that the model reads a
// transcript rather than a conversation to continue. The newest messages win when the text
// must fit maxBytes. attached (may be nil) says what a user message's images and files
// were, so that the summary keeps them.
func serialize(msgs []llm.Message, maxBytes int, attached func(llm.Part) string) string {
	parts := make([]string, len(msgs))
	for i, m := range msgs {
		var b strings.Builder
		switch m.Role {
		case llm.RoleUser:
			b.WriteString("[User]: ")
			b.WriteString(clip(m.Content, maxSummaryText))
			for _, p := range m.Parts {
				b.WriteString("\n")
				if attached != nil {
					b.WriteString(attached(p))
				} else {
					fmt.Fprintf(&b, "[User sent %s %s]", p.Type, partName(p))
				}
			}
		case llm.RoleAssistant:
			b.WriteString("[Assistant]: ")
			b.WriteString(clip(m.Content, maxSummaryText))
			for _, tc := range m.ToolCalls {
				fmt.Fprintf(&b, "\n[Assistant called tool %s]: %s", tc.Name, clip(string(tc.Arguments), maxSummaryToolText))
			}
		case llm.RoleTool:
			kind := "result"
			if m.IsError {
				kind = "error"
			}
			fmt.Fprintf(&b, "[Tool %s %s]: %s", m.Name, kind, clip(m.Content, maxSummaryToolText))
		default:
			b.WriteString("[" + string(m.Role) + "]: ")
			b.WriteString(clip(m.Content, maxSummaryText))
		}
		parts[i] = b.String()
	}
	total, first := 0, len(parts)
	for first > 0 {
		l := len(parts[first-1]) + 2
		if total+l > maxBytes && first < len(parts) {
			break
		}
		total += l
		first--
	}
	out := strings.Join(parts[first:], "\n\n")
	if first > 0 {
		out = "[… earlier messages left out …]\n\n" + out
	}
	return out
}

// compact runs one compaction within the caller's hold of the history: keep tokens of the
// newest entries stay verbatim (manual compactions keep at least the latest exchange out of
// the summary when nothing else would be summarised).
func (r *run) compact(reason, instructions string, fixed int) (CompactResult, error) {
	h := r.s.hist
	b := r.cfg.budget
	cut := cutPoint(h.entries, b.keep)
	if cut == 0 && reason != hooks.CompactThreshold {
		cut = lastUser(h.entries)
	}
	if p := slices.IndexFunc(h.entries, func(e entry) bool { return e.id == r.prompt }); r.prompt != "" && p >= 0 {
		// During a run its message and its steps stay verbatim: a crash may cut the run, and
		// the message answered again after the restart goes on from its saved steps (resume)
		// only when it finds them. Summarised, it was asked again from the start: its tools
		// ran twice and the model read it twice. A run too long for the request even so has
		// its oldest steps left out of the request (prepare), not out of the history.
		cut = min(cut, p)
	}
	if cut == 0 {
		r.outcome(reason, "nothing")
		return CompactResult{}, ErrNothingToCompact
	}
	r.s.setPhase(PhaseCompact)
	defer r.s.setPhase(r.phase)

	before := h.tokens(fixed)
	older := make([]llm.Message, cut)
	for i, e := range h.entries[:cut] {
		older[i] = e.msg
	}
	info := r.cfg.info
	var (
		summary  string
		fromHook bool
	)
	if bus := r.cfg.bus; bus != nil {
		res := bus.BeforeCompact(r.ctx, &hooks.SessionBeforeCompact{Session: info, Entries: cut, TokensBefore: before,
			Reason: reason, Instructions: instructions, PreviousSummary: h.summary, Messages: older})
		if res != nil && res.Cancel {
			r.outcome(reason, "cancelled")
			r.s.log.Info("a hook cancelled compaction", "key", r.s.key, "reason", res.Reason)
			return CompactResult{}, &CompactCancelledError{Reason: res.Reason}
		}
		if res != nil {
			summary, fromHook = strings.TrimSpace(res.Summary), true
		}
	}
	if summary == "" {
		var err error
		if summary, err = r.summarise(older, h.summary, instructions); err != nil {
			r.outcome(reason, "failed")
			r.s.log.Warn("compaction failed", "key", r.s.key, "err", err)
			return CompactResult{}, err
		}
	}
	first := h.compact(summary, cut, before, fromHook)
	r.save()
	after := h.tokens(fixed)
	r.s.publish(h, fixed, r.cfg.budget.window)
	r.outcome(reason, "done")
	r.s.log.Info("conversation compacted", "key", r.s.key, "reason", reason, "messages", cut, "tokens_before", before, "tokens_after", after)
	r.emit(&hooks.SessionCompact{Session: info, Reason: reason, Summary: summary, FirstKeptEntryID: first,
		TokensBefore: before, TokensAfter: after, FromHook: fromHook})
	return CompactResult{TokensBefore: before, TokensAfter: after, Summarised: cut, FromHook: fromHook}, nil
}

func (r *run) outcome(reason, outcome string) {
	if r.cfg.onCompact != nil {
		r.cfg.onCompact(reason, outcome)
	}
}

// summarise asks the session's model for a summary of older (folding in the previous
// summary). A summary request that is itself too long is retried with less of the text.
func (r *run) summarise(older []llm.Message, previous, instructions string) (string, error) {
	b := r.cfg.budget
	// Room for the request: the window less the summary's own tokens and some slack, at a
	// pessimistic 3 bytes per token.
	room := max(b.window-b.summary-estimateText(summarySystem)-estimateText(summaryAsk)-estimateText(previous)-estimateText(instructions)-256, 256) * 3
	if r.ceiling > 0 {
		room = min(room, r.ceiling*2) // half of what was too long, in bytes
	}
	for attempt := 0; ; attempt++ {
		var ask strings.Builder
		ask.WriteString(summaryAsk)
		if instructions != "" {
			ask.WriteString("\n\nThe user asked for this summary with these instructions: ")
			ask.WriteString(instructions)
		}
		if previous != "" {
			ask.WriteString("\n\nAn earlier part of the conversation was already summarised; fold it into the new summary:\n<previous-summary>\n")
			ask.WriteString(previous)
			ask.WriteString("\n</previous-summary>")
		}
		ask.WriteString("\n\n<conversation>\n")
		ask.WriteString(serialize(older, room, r.attached))
		ask.WriteString("\n</conversation>")

		req := r.request(summarySystem, []llm.Message{{Role: llm.RoleUser, Content: ask.String()}}, nil)
		req.MaxTokens = b.summary
		resp, _, err := r.call(req, nil)
		if err == nil {
			text := strings.TrimSpace(resp.Message.Content)
			if text == "" {
				return "", errors.New("the model returned an empty summary")
			}
			return text, nil
		}
		if !isOverflow(err) || attempt >= 2 || r.ctx.Err() != nil {
			return "", err
		}
		room /= 2
	}
}

// attached is how the summariser reads a part the user sent: an image by its name, a
// document by its name and the start of its text (the summary is all that will be left of
// it once its message is summarised).
func (r *run) attached(p llm.Part) string {
	if p.Type == llm.PartImage {
		return fmt.Sprintf("[User sent image %s]", partName(p))
	}
	m, ok := r.cfg.provider.(*mediaProvider)
	if !ok {
		return fmt.Sprintf("[User sent file %s]", partName(p))
	}
	return "[User sent file " + partName(p) + "]\n" + m.document(r.ctx, p, maxSummaryToolText)
}

// Compact summarises the older part of the conversation now (/compact), with optional
// instructions for the summary. It fails while a run is in progress, when a hook cancels
// (*CompactCancelledError) and when there is nothing to summarise (ErrNothingToCompact).
func (s *Session) Compact(ctx context.Context, instructions string) (CompactResult, error) {
	if !s.runMu.TryLock() {
		return CompactResult{}, errors.New("a reply is still in progress; try again when it is done")
	}
	defer s.runMu.Unlock()
	s.mu.Lock()
	cfg := s.cfg
	s.mu.Unlock()
	r := &run{s: s, cfg: cfg, ctx: ctx, on: func(Update) {}, phase: PhaseIdle}
	defer s.hist.release()
	return r.compact(hooks.CompactManual, strings.TrimSpace(instructions), r.fixed(cfg.system))
}

// idleReset starts a fresh history when the chat was silent longer than the profile's
// idle_reset (session_before_reset may refuse).
func (r *run) idleReset() {
	h := r.s.hist
	if r.cfg.idleReset <= 0 || h.total == 0 || h.lastActivity.IsZero() || time.Since(h.lastActivity) <= r.cfg.idleReset {
		return
	}
	if bus := r.cfg.bus; bus != nil {
		if c := bus.SessionBefore(r.ctx, &hooks.SessionBeforeReset{Session: r.cfg.info}); c != nil {
			r.s.log.Info("a hook kept the history past idle_reset", "key", r.s.key, "reason", c.Reason)
			return
		}
	}
	r.s.log.Info("the chat was idle past idle_reset: starting a fresh history", "key", r.s.key,
		"idle", time.Since(h.lastActivity).Round(time.Second), "idle_reset", r.cfg.idleReset)
	h.reset()
	r.s.count.Store(0)
}
