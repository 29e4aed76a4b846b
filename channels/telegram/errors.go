package telegram

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-telegram/bot"

	"gateway/channels"
	"gateway/internal/pace"
)

// apiError is a Bot API failure, its text scrubbed of the token by the shared
// channels.Scrubber, with the kind and retry_after that the poll loop and the Sender act on.
// It unwraps only to its kind (one of the SDK's sentinel errors, or context cancellation)
// and to the scrubbed error (so that channels.Sender's Scrub passes it through unchanged),
// never to the original error, whose text may hold the token (the SDK puts it in every URL).
type apiError struct {
	err        error // the scrubbed error: its text is the message
	kind       error // bot.ErrorBadRequest, ... or nil
	retryAfter int   // seconds, for 429
	migrateTo  int64 // the chat's new id, for a send to a group upgraded to a supergroup
}

func (e *apiError) Error() string   { return e.err.Error() }
func (e *apiError) Unwrap() []error { return []error{e.kind, e.err} }

// apiKinds are the SDK's sentinel errors an apiError may be of.
var apiKinds = []error{bot.ErrorBadRequest, bot.ErrorForbidden, bot.ErrorUnauthorized, bot.ErrorNotFound, bot.ErrorConflict, bot.ErrorTooManyRequests}

// scrubber is the shared channels.Scrubber (of the token and the webhook secret) with the
// Bot API's error kinds on top.
type scrubber struct{ channels.Scrubber }

func newScrubber(secrets ...string) scrubber { return scrubber{channels.NewScrubber(secrets...)} }

// wrap turns an SDK or HTTP error into an apiError, safe to log and return.
func (s scrubber) wrap(err error) error {
	if err == nil {
		return nil
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return err
	}
	e := &apiError{err: s.Wrap(err, apiKinds...)}
	var tmr *bot.TooManyRequestsError
	var mig *bot.MigrateError
	switch {
	case errors.As(err, &tmr):
		e.kind, e.retryAfter = bot.ErrorTooManyRequests, tmr.RetryAfter
	case errors.As(err, &mig):
		e.kind, e.migrateTo = bot.ErrorBadRequest, int64(mig.MigrateToChatID)
	default:
		for _, k := range append([]error{context.Canceled, context.DeadlineExceeded}, apiKinds...) {
			if errors.Is(err, k) {
				e.kind = k
				break
			}
		}
	}
	return e
}

// classify is the Senders' Classify: it scrubs err and marks it for the retry: 429 waits
// retry_after (and holds the chat), 5xx, network failures and an attempt that ran out of
// its own time are transient, 4xx are final, and those that say the bot cannot reach the
// chat are marked channels.ErrNoChat. Once the caller's context ends, the Sender retries
// nothing.
func (s scrubber) classify(err error) error {
	if err == nil {
		return nil
	}
	var e *apiError
	if !errors.As(s.wrap(err), &e) {
		return s.Wrap(err) // not reached: wrap makes an apiError
	}
	switch e.kind {
	case bot.ErrorTooManyRequests:
		return pace.RetryAfter(e, time.Duration(max(e.retryAfter, 1))*time.Second)
	case bot.ErrorBadRequest, bot.ErrorForbidden:
		if nc := s.noChat(e); nc != nil {
			return nc
		}
		return e
	case bot.ErrorUnauthorized, bot.ErrorNotFound, bot.ErrorConflict:
		return e
	}
	return pace.Transient(e)
}

// noChatReasons are Telegram's refusals of a call because the bot cannot reach the chat,
// by the start of their description, each with what the admin reads instead: what
// happened and what to do about it. A group upgraded to a supergroup is not among them:
// that answer names the chat's new id, and the answer goes on there (see migratedTo).
var noChatReasons = []struct{ desc, why string }{
	{"Bad Request: chat not found", "Telegram knows no chat by this id that the bot can reach: the chat was deleted, or the bot is not in it, or the user never started a chat with the bot"},
	{"Bad Request: group chat was deactivated", "the group was deleted"},
	{"Forbidden: bot was blocked by the user", "the user blocked the bot: it can write to them again once they unblock it"},
	{"Forbidden: bot was kicked from the", "the bot was removed from this chat: add it again to post there"},
	{"Forbidden: bot is not a member of the", "the bot is not a member of this chat: add it there to post"},
	{"Forbidden: user is deactivated", "the user deleted their Telegram account"},
	{"Forbidden: bot can't initiate conversation with a user", "the user never started a chat with the bot: they must open it and press Start first"},
}

// noChat is e told in words when Telegram refused the call because the bot cannot reach the
// chat, marked channels.ErrNoChat; nil for any other refusal. The admin reads it (the API's
// answer, the log), so it says what to check, with Telegram's description for the details.
// It keeps e's kind, so callers still tell a 400 from a 403.
func (s scrubber) noChat(e *apiError) error {
	text := e.Error()
	for _, r := range noChatReasons {
		if i := strings.Index(text, r.desc); i >= 0 {
			msg := fmt.Errorf("%s (%s)", r.why, text[i:])
			return channels.NoChat(&apiError{err: s.Wrap(msg), kind: e.kind})
		}
	}
	return nil
}

// migratedTo is the chat's new id when err is Telegram refusing a call to a group that was
// upgraded to a supergroup (400 with parameters.migrate_to_chat_id); 0 otherwise.
func migratedTo(err error) int64 {
	var e *apiError
	if errors.As(err, &e) {
		return e.migrateTo
	}
	return 0
}

// isNotModified reports Telegram's answer to an edit that changes nothing.
func isNotModified(err error) bool {
	return err != nil && strings.Contains(err.Error(), "message is not modified")
}

// isParseError reports Telegram refusing the HTML of a message.
func isParseError(err error) bool {
	return err != nil && strings.Contains(err.Error(), "can't parse entities")
}

// isVoiceForbidden reports Telegram refusing a voice note because the user's privacy
// settings do not accept voice messages (Telegram Premium users may set so).
func isVoiceForbidden(err error) bool {
	return err != nil && strings.Contains(err.Error(), "VOICE_MESSAGES_FORBIDDEN")
}

// isGone reports Telegram refusing to edit or delete a message that is no longer there to
// change: deleted, or past the time a bot may change it.
func isGone(err error) bool {
	if err == nil {
		return false
	}
	e := err.Error()
	return strings.Contains(e, "message to edit not found") || strings.Contains(e, "message to delete not found") ||
		strings.Contains(e, "message can't be edited") || strings.Contains(e, "message can't be deleted")
}
