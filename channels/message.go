// Package channels holds the message model shared by every chat platform (Message,
// Part, Frame) and the Channel contract each platform adapter implements.
package channels

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// PartType names what a Part carries. These strings are part of the hook wire format.
type PartType string

const (
	PartText  PartType = "text"
	PartAudio PartType = "audio" // voice notes and audio files
	PartImage PartType = "image"
	PartFile  PartType = "file" // documents and anything else
)

// Part is one piece of a message: text, or a media file the adapter downloaded.
// Media lives on disk (Path) or, when small and generated in-process, in Data. A part not
// yet downloaded carries a platform reference instead (Ref, with Type, MIME, Name and the
// announced Size): the gateway journals it so and has the adapter's Fetcher download it on
// the chat's session before any hook sees the message.
type Part struct {
	Type     PartType `json:"type"`
	Text     string   `json:"text,omitempty"`
	MIME     string   `json:"mime,omitempty"`
	Path     string   `json:"path,omitempty"`
	Data     []byte   `json:"-"`
	Name     string   `json:"name,omitempty"`     // original file name, when the platform gives one
	Size     int64    `json:"size,omitempty"`     // bytes
	Duration float64  `json:"duration,omitempty"` // seconds, for audio when known
	Voice    bool     `json:"voice,omitempty"`    // audio recorded as a voice note (not a music file)
	// Ref is the adapter's own reference to media still on the platform (opaque to the
	// gateway). It is not part of the hook wire: hooks only ever see fetched parts; the
	// gateway's intake journal keeps it beside the message.
	Ref string `json:"-"`
}

// TextPart is shorthand for a text part.
func TextPart(s string) Part { return Part{Type: PartText, Text: s} }

// ChatType tells direct messages from group conversations; the mention gate applies to groups.
type ChatType string

const (
	ChatDM    ChatType = "dm"
	ChatGroup ChatType = "group"
)

// Reply is the message a user answered to, when they used the platform's reply feature.
type Reply struct {
	ID      string `json:"id"`
	Text    string `json:"text,omitempty"`
	UserID  string `json:"user_id,omitempty"`
	FromBot bool   `json:"from_bot,omitempty"` // the user replied to this bot
}

// Message is one inbound user message, normalised by its adapter.
type Message struct {
	ID        string    `json:"id"`      // platform message id, used to drop redeliveries
	Channel   string    `json:"channel"` // adapter name: "telegram", "web", ...
	ChatID    string    `json:"chat_id"`
	ThreadID  string    `json:"thread_id"` // forum topic / thread; "" when none
	UserID    string    `json:"user_id"`
	UserName  string    `json:"user_name,omitempty"`
	ChatType  ChatType  `json:"chat_type"`
	Mentioned bool      `json:"mentioned,omitempty"` // the bot was @mentioned or replied to
	ReplyTo   *Reply    `json:"reply_to,omitempty"`
	Parts     []Part    `json:"parts"`
	IsVoice   bool      `json:"is_voice,omitempty"` // the user spoke (kept after STT replaces the audio)
	Time      time.Time `json:"time"`
	// MigrateFrom, set on a message an adapter makes of its own, says the platform gave
	// the chat MigrateFrom the id ChatID (Telegram upgrading a group to a supergroup): the
	// gateway moves that chat's conversation and settings here, and answers nothing. It
	// is journaled like any message, so that a move a crash cut is done after the restart.
	// Never part of the hook wire (hooks never see such a message).
	MigrateFrom string `json:"migrate_from,omitempty"`
	// Injected marks a turn the admin API started (POST /api/v1/inject): its text is the
	// prompt, with neither receive hooks nor commands. The gateway journals it like any
	// message, so that a crash does not lose it. Never part of the hook wire.
	Injected bool `json:"injected,omitempty"`
	// NextTurn, on an Injected message, says it waits for the chat's next turn (deliver_as
	// next_turn) rather than starting one: after a restart it waits for that turn again.
	NextTurn bool `json:"next_turn,omitempty"`
	// Inject, on an Injected message of cluster mode's shared intake, is the request as the
	// admin API took it: the process that answers the chat decides there, when the message
	// comes to its session, how it goes in (steer, next turn, a turn of its own). Never part
	// of the hook wire.
	Inject *Inject `json:"inject,omitempty"`
	// Seq is the message's place in the gateway's intake journal (0: not journaled). It is
	// set by the gateway and never part of the wire.
	Seq uint64 `json:"-"`
	// Resume is the placement of an answer to it cut by a crash (Target.Resume), read back
	// from the journal by the gateway with the message; never part of the wire.
	Resume string `json:"-"`
	// Replayed is set by the gateway on a message read back from its journal at start: an
	// earlier attempt at answering it may have been cut by the crash. Never part of the wire.
	Replayed bool `json:"-"`
}

// Inject is an admin API inject as cluster mode's shared intake carries it.
type Inject struct {
	DeliverAs string `json:"deliver_as,omitempty"`
	Trigger   bool   `json:"trigger,omitempty"`
	// Waiter names the API call that published it, on the process that did: when that
	// process takes it, the call learns whether the session took it and watches its
	// delivery (wait: delivered).
	Waiter string `json:"waiter,omitempty"`
}

// HasRefs reports parts still to be fetched (see Fetcher).
func (m *Message) HasRefs() bool {
	for _, p := range m.Parts {
		if p.Ref != "" {
			return true
		}
	}
	return false
}

// Fetched is what FetchRefs made of a message's parts.
type Fetched struct {
	Parts   []Part   // the parts in order, each referenced one replaced by its download, the refused left out
	Saved   []string // the downloaded files' paths
	Refused []Part   // the referenced parts not downloaded
	// Limits holds, for each of Refused, the size limit it was over (0: it failed otherwise).
	Limits   []int64
	Refusals []string // what to tell the user about them, each text once
	Total    int      // the referenced parts
}

// Refusal is why a fetch (FetchRefs) did not download a part: Text is what the user reads;
// Limit, set when the part was over the adapter's size limit (TooLarge), lets the agent be
// told that it was too large rather than that it could not be downloaded.
type Refusal struct {
	Text  string
	Limit int64
}

// Refuse is the refusal of a part that could not be downloaded, told to the user as text.
func Refuse(text string) Refusal { return Refusal{Text: text} }

// TooLarge is the refusal of a part over limit bytes, in the words every adapter tells it:
// what names the part for its sender ("that voice note", "report.pdf"); size is what the
// part weighs when known to be over limit (else the sentence leaves it out). A recording
// was not heard, anything else not seen.
func TooLarge(what string, typ PartType, size, limit int64) Refusal {
	missed := "seen"
	if typ == PartAudio {
		missed = "heard"
	}
	text := fmt.Sprintf("Sorry, %s is too large for me (I can take up to %s), so I haven't %s it.", what, HumanSize(limit), missed)
	if size > limit {
		text = fmt.Sprintf("Sorry, %s is too large for me (%s; I can take up to %s), so I haven't %s it.", what, OverSize(size, limit), HumanSize(limit), missed)
	}
	return Refusal{Text: text, Limit: limit}
}

// Note tells the agent what of the message it does not see (Refused), and why: too large
// for this gateway, or not downloaded. one names a lone part with its article ("a voice
// note", "a file (a.txt)"); items names the message's parts together ("items of this
// album"); name, when not nil, names each of several refused parts in a list.
func (f Fetched) Note(one func(Part) string, items string, name func(Part) string) string {
	var limit int64
	over := 0
	for _, l := range f.Limits {
		if l > 0 {
			over, limit = over+1, l
		}
	}
	tooLarge := "larger than the " + HumanSize(limit) + " this gateway accepts"
	if f.Total <= 1 {
		why := "could not be downloaded"
		if over == 1 {
			why = "is " + tooLarge
		}
		return fmt.Sprintf("[The user also sent %s, which %s]", one(f.Refused[0]), why)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[%d of the %d %s ", len(f.Refused), f.Total, items)
	switch {
	case over == 0:
		b.WriteString("could not be downloaded")
	case over == len(f.Refused) && over == 1:
		b.WriteString("is " + tooLarge)
	case over == len(f.Refused):
		b.WriteString("are " + tooLarge)
	default:
		fmt.Fprintf(&b, "could not be downloaded (%d of them %s)", over, tooLarge)
	}
	if name != nil {
		for i, p := range f.Refused {
			if i == 0 {
				b.WriteString(": ")
			} else {
				b.WriteString(", ")
			}
			b.WriteString(name(p))
		}
	}
	b.WriteString("]")
	return b.String()
}

// Settle makes f msg's outcome, by the rule every adapter keeps. With nothing refused, msg
// takes f's parts. A fetch cut by ctx (out of time, or the gateway stopping) fails msg
// whole: it keeps its references, so a restart fetches it again, and what was saved is
// removed. Otherwise the user is told (tell) what could not be fetched; with nothing left
// for the agent (no other part, and no words of the message's own: hasText) msg fails with
// that, else it goes on with note(f) in place of the missing files. The returned error's
// text is what the user reads when msg fails.
func (f Fetched) Settle(ctx context.Context, msg *Message, hasText bool, note func(Fetched) string, tell func(string)) error {
	if len(f.Refused) == 0 {
		msg.Parts = f.Parts
		return nil
	}
	refusal := strings.Join(f.Refusals, "\n")
	if ctx.Err() != nil {
		for _, p := range f.Saved {
			_ = os.Remove(p)
		}
		return errors.New(refusal)
	}
	if len(f.Refused) == f.Total && !hasText {
		return errors.New(refusal)
	}
	tell(refusal)
	msg.Parts = append(f.Parts, TextPart(note(f)))
	// Voice that never arrived was not heard: its caption is no transcript, and the answer
	// is not one to speak.
	msg.IsVoice = msg.IsVoice && slices.ContainsFunc(msg.Parts, func(p Part) bool { return p.Type == PartAudio })
	return nil
}

// AnyRef reports whether flag holds for one of refs' references, each decoded as the
// adapter's own reference type R: what an adapter wrote into its references when it took
// the message (that the message has words of its own, for Settle's hasText), which a
// restart reads back from the journal.
func AnyRef[R any](refs []Part, flag func(R) bool) bool {
	return slices.ContainsFunc(refs, func(p Part) bool {
		var r R
		return json.Unmarshal([]byte(p.Ref), &r) == nil && flag(r)
	})
}

// FetchRefs runs fetch on each of parts that is a reference (see Fetcher), in order, and
// gathers the outcome; fetch returns the downloaded part, or a refusal (Text set): what to
// tell the user, and whether the part was too large. Settle then says what the failures
// mean for the message.
func FetchRefs(parts []Part, fetch func(Part) (Part, Refusal)) Fetched {
	var f Fetched
	for _, p := range parts {
		if p.Ref == "" {
			f.Parts = append(f.Parts, p)
			continue
		}
		f.Total++
		got, refusal := fetch(p)
		if refusal.Text != "" {
			f.Refused = append(f.Refused, p)
			f.Limits = append(f.Limits, refusal.Limit)
			if !slices.Contains(f.Refusals, refusal.Text) {
				f.Refusals = append(f.Refusals, refusal.Text)
			}
			continue
		}
		f.Saved = append(f.Saved, got.Path)
		f.Parts = append(f.Parts, got)
	}
	return f
}

// Text joins the message's text parts with newlines.
func (m *Message) Text() string { return JoinText(m.Parts) }

// JoinText joins the text of the text parts with newlines.
func JoinText(parts []Part) string {
	var b strings.Builder
	for _, p := range parts {
		if p.Type != PartText || p.Text == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.Text)
	}
	return b.String()
}

// Target says where the frames of one answer go.
type Target struct {
	Channel   string   `json:"channel"`
	ChatID    string   `json:"chat_id"`
	ThreadID  string   `json:"thread_id"`
	ChatType  ChatType `json:"chat_type"`
	ReplyToID string   `json:"reply_to_id,omitempty"` // the user's message; groups quote it
	// Resume is where an earlier attempt at this same answer left its messages, cut by a
	// crash before its done: the placement its stream last reported through Placed. Empty
	// for a first attempt. See Channel.Open.
	Resume string `json:"-"`
	// Placed, when set, is told the answer's placement each time it changes (a message
	// posted, or one removed), so that the gateway can keep it for a Resume.
	Placed func(placement string) `json:"-"`
}

// TargetOf answers the given message in the same chat and thread.
func TargetOf(m *Message) Target {
	return Target{Channel: m.Channel, ChatID: m.ChatID, ThreadID: m.ThreadID, ChatType: m.ChatType, ReplyToID: m.ID}
}

// FrameType names a step of an answer as it streams to a chat.
type FrameType string

const (
	FrameStart  FrameType = "start"  // a turn began: show typing
	FrameDelta  FrameType = "delta"  // more answer text (Text is the new piece)
	FrameTool   FrameType = "tool"   // a tool started or finished (Tool)
	FrameStatus FrameType = "status" // a short progress note (Text), e.g. "retrying"
	FrameParts  FrameType = "parts"  // extra parts to deliver, e.g. TTS voice (Parts)
	FrameDone   FrameType = "done"   // the answer is complete; Text is the whole answer text
	FrameError  FrameType = "error"  // the turn failed; Text is a plain-language reason. Ends the answer like done.
)

// ToolInfo describes a tool step for display.
type ToolInfo struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Phase   string `json:"phase"` // "start" or "end"
	IsError bool   `json:"is_error,omitempty"`
	Summary string `json:"summary,omitempty"`
}

// Frame is one step of an answer. A stream of frames is: start, then any of
// delta/tool/status, then parts (if any), then exactly one done or error.
// A one-shot notice (a command reply, a reject reason) is a lone done frame with Text.
type Frame struct {
	Type  FrameType `json:"type"`
	Text  string    `json:"text,omitempty"`
	Tool  *ToolInfo `json:"tool,omitempty"`
	Parts []Part    `json:"parts,omitempty"`
}
