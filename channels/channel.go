package channels

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Channel is one chat platform adapter. Implementations are safe for concurrent use.
//
// Start connects to the platform and returns once the connection is really made, or with an
// error that names the channel and the problem (bad token, unreachable API) without
// revealing secrets. A failure that will not pass without the admin (a rejected token, a
// setting the platform refuses) is marked with Permanent; any other (network, timeout, 5xx,
// 429) may pass, and the gateway calls Start again later, so a failed Start leaves nothing
// running and may be called again. After Start returns nil the adapter delivers inbound
// messages to sink from goroutines it owns, reconnecting on its own after drops, until Stop.
// The ctx given to Start bounds only the connect step.
//
// Open starts one answer to target; the gateway writes the answer's frames to the returned
// Stream in order, from a single goroutine. A target that cannot be a chat of the platform
// (an id of the wrong form) is refused with an error marked by BadTarget.
//
// An answer cut by a crash must not leave its streaming preview beside a second, full
// answer. So a stream that posts messages reports where they are through target.Placed
// (when set) each time that changes: a placement, the adapter's own string (its message
// ids), opaque to the gateway, which keeps it with the message. When the message is
// answered again after the restart, target.Resume carries the last one reported: the
// stream then edits those messages into the new answer instead of posting new ones,
// deletes those the answer no longer needs, and posts the rest as usual. One it can no
// longer edit (the user deleted it, or it is too old) is left aside and the answer goes on
// in new messages. Placed may be called from any goroutine the stream owns, never two at
// once, and should not be slow. An adapter that never posts (the web chat) ignores both.
//
// Stop disconnects and returns once every goroutine the adapter started has ended, or ctx is done.
type Channel interface {
	Name() string
	Start(ctx context.Context, sink Sink) error
	Open(ctx context.Context, target Target) (Stream, error)
	Stop(ctx context.Context) error
}

// Stream renders one answer's frames on the platform. Send returns when the frame is
// handled: for done and error, when everything of the answer reached the platform. It
// paces itself to the platform's limits, honouring retry_after, and retries transient
// failures a bounded number of times; the error it returns is final for that frame.
type Stream interface {
	Send(ctx context.Context, f Frame) error
}

// Sink is the gateway side of an adapter.
type Sink interface {
	// Deliver hands over one inbound message that passed the adapter's access policy.
	// It returns once the gateway has taken the message (journaled it, or queued it
	// where there is no journal), so the adapter may then
	// acknowledge it to the platform (advance an offset, ack an envelope). An error
	// means the message was not taken (shutting down without a journal, the journal
	// failing): do not ack, and do not move any cursor past it.
	Deliver(ctx context.Context, msg *Message) error
	// Connected reports a platform connection really made (true) or lost (false, err).
	Connected(channel string, up bool, err error)
}

// Fetcher is implemented by adapters that deliver media as references (Part.Ref) so that
// their intake never waits on a download: the message is journaled by Deliver, and so
// acknowledged to the platform, at once. Fetch downloads msg's referenced parts, replacing
// each Ref with Path, Size and MIME (it may also add text parts, e.g. a note that some
// items of an album could not be fetched). The gateway calls it on the chat's own session
// goroutine, in the chat's order, before message:receive hooks, with a bounded ctx; it may
// run again for the same message after a restart. A failure's error text is what the user
// is told, in plain words ("That voice note is 30 MB; the limit is 20 MB."), and the
// message is then answered by that.
type Fetcher interface {
	Fetch(ctx context.Context, msg *Message) error
}

// HTTPChannel is implemented by adapters that serve routes on the gateway's HTTP
// listener (web chat, webhooks). Routes is called once before Start.
type HTTPChannel interface {
	Routes(mux *http.ServeMux)
}

// ErrPermanent marks a Start failure that will not pass without the admin: the gateway
// fails its own start with it at once instead of trying again. Test with errors.Is.
var ErrPermanent = errors.New("permanent failure")

// Permanent marks err (keeping its text) as a failure that will not pass without the
// admin; nil stays nil.
func Permanent(err error) error {
	if err == nil || errors.Is(err, ErrPermanent) {
		return err
	}
	return permanent{err}
}

type permanent struct{ err error }

func (p permanent) Error() string   { return p.err.Error() }
func (p permanent) Unwrap() []error { return []error{p.err, ErrPermanent} }

// ErrBadTarget marks an Open refused because the target cannot be a chat of the platform
// at all (a Telegram chat id that is not a number): the caller's mistake, which no retry
// and no platform would mend, as opposed to a platform that failed. Test with errors.Is.
var ErrBadTarget = errors.New("not a chat of this platform")

// BadTarget marks err (keeping its text, which says what a valid id looks like) as an
// ErrBadTarget; nil stays nil.
func BadTarget(err error) error {
	if err == nil || errors.Is(err, ErrBadTarget) {
		return err
	}
	return badTarget{err}
}

type badTarget struct{ err error }

func (b badTarget) Error() string   { return b.err.Error() }
func (b badTarget) Unwrap() []error { return []error{b.err, ErrBadTarget} }

// ErrNoChat marks a send the platform refused because no chat by that id is one the bot can
// reach (Telegram's chat not found or bot was blocked by the user, Discord's Unknown Channel,
// Slack's channel_not_found): it was deleted, the bot was removed from it or blocked, or the
// id never named one. No retry mends it; the admin must, so the
// error's text says so in words, not in the platform's codes. The shared Sender keeps the
// mark through its scrubbing. Test with errors.Is.
var ErrNoChat = errors.New("no such chat for the bot")

// NoChat marks err (keeping its text) as an ErrNoChat; nil stays nil.
func NoChat(err error) error {
	if err == nil || errors.Is(err, ErrNoChat) {
		return err
	}
	return noChat{err}
}

type noChat struct{ err error }

func (n noChat) Error() string   { return n.err.Error() }
func (n noChat) Unwrap() []error { return []error{n.err, ErrNoChat} }

// TargetChecker is implemented by an adapter whose chat ids have a form of their own
// (Telegram's numbers, Discord's snowflakes, Slack's channel ids). The admin API asks it
// before a send or an inject, so that an id no chat of the platform can have is the
// caller's mistake, told at once, rather than a session made for it or a platform round
// trip that fails. CheckTarget looks at the form only, never at the platform: a
// well-formed id of a chat that does not exist passes. Its error is marked by BadTarget
// and says in plain words what a valid id looks like. It must be cheap and safe for
// concurrent use.
type TargetChecker interface {
	CheckTarget(t Target) error
}

// CheckTarget checks t's chat and thread ids with ch's TargetChecker; a channel without
// one takes any id.
func CheckTarget(ch Channel, t Target) error {
	if c, ok := ch.(TargetChecker); ok {
		return c.CheckTarget(t)
	}
	return nil
}

// ErrNotAccepted is returned by Sink.Deliver when the gateway cannot take the message now.
var ErrNotAccepted = errors.New("message not accepted")

// Draining is implemented by a Sink that can tell it is draining for a shutdown: a message
// it takes meanwhile (Deliver returns nil) is kept, journaled, and answered only after the
// restart. An adapter whose user would otherwise see nothing of that until then (the web
// chat) asks before Deliver, and says so when the message is taken.
type Draining interface {
	Draining() bool
}

// IsDraining reports whether sink says it is draining for a shutdown.
func IsDraining(sink Sink) bool {
	d, ok := sink.(Draining)
	return ok && d.Draining()
}

// ErrStopping is the ErrNotAccepted of a gateway that is shutting down and has nowhere to
// keep the message for after the restart (no intake journal): the user must send it again
// once the gateway is back, and an adapter that can tell them should say so in those words.
var ErrStopping = fmt.Errorf("%w: the gateway is shutting down", ErrNotAccepted)

// CommandNamer is a channel whose platform has users type some commands under other names
// (Slack reserves /status, so its app registers /agent-status): /help lists them so.
type CommandNamer interface {
	// CommandName is what a user of the platform types for the gateway's command name.
	CommandName(name string) string
	// HelpNote, unless "", ends /help: what else to know of commands on the platform.
	HelpNote() string
}

// Command is a slash command offered in a platform's native command menu.
type Command struct {
	Name        string // without the slash: "pop"
	Description string
}

// Summary is the description as a platform's menu shows it: "/name" when there is none,
// cut to at most max characters.
func (c Command) Summary(max int) string {
	d := strings.TrimSpace(c.Description)
	if d == "" {
		d = "/" + c.Name
	}
	if r := []rune(d); len(r) > max {
		d = string(r[:max-1]) + "…"
	}
	return d
}

// CommandMenu is implemented by adapters that offer the gateway's commands natively
// (Telegram's command menu, Discord's application commands). The gateway calls
// SetCommands after Start and again when a reload changed the list; the commands still
// work when typed, so a failure only leaves the menu out of date.
type CommandMenu interface {
	SetCommands(ctx context.Context, cmds []Command) error
}

// ChatCommandMenu is implemented by adapters whose menu can differ per chat (Telegram's
// command scopes): the gateway sets it for chats bound to a profile with commands of its own.
type ChatCommandMenu interface {
	SetChatCommands(ctx context.Context, chatID string, cmds []Command) error
}

// Pinned is implemented by a channel whose chats only the process they connected to can
// answer (the web chat's WebSockets). In cluster mode its messages are answered where they
// arrived instead of going through the shared intake.
type Pinned interface {
	Pinned() bool
}

// IsPinned reports whether ch is a pinned channel.
func IsPinned(ch Channel) bool {
	p, ok := ch.(Pinned)
	return ok && p.Pinned()
}
