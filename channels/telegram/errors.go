package telegram

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/go-telegram/bot"

	"gateway/internal/pace"
)

// apiError is a Bot API failure with the token scrubbed from its text. It unwraps only
// to the SDK's sentinel errors, never to the original error whose text may hold the token
// (the SDK puts it in every URL).
type apiError struct {
	msg        string
	kind       error // bot.ErrorBadRequest, ... or nil
	retryAfter int   // seconds, for 429
}

func (e *apiError) Error() string { return e.msg }
func (e *apiError) Unwrap() error { return e.kind }

// scrubber removes the token from text.
type scrubber struct{ token string }

func (s scrubber) String(text string) string {
	if s.token == "" {
		return text
	}
	text = strings.ReplaceAll(text, s.token, "***")
	return strings.ReplaceAll(text, url.PathEscape(s.token), "***")
}

// wrap turns an SDK or HTTP error into one that is safe to log and return.
func (s scrubber) wrap(err error) error {
	if err == nil {
		return nil
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return err
	}
	e := &apiError{msg: s.String(err.Error())}
	var tmr *bot.TooManyRequestsError
	var mig *bot.MigrateError
	switch {
	case errors.As(err, &tmr):
		e.kind, e.retryAfter = bot.ErrorTooManyRequests, tmr.RetryAfter
	case errors.As(err, &mig):
		e.kind = bot.ErrorBadRequest
	case errors.Is(err, context.Canceled):
		e.kind = context.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		e.kind = context.DeadlineExceeded
	default:
		for _, k := range []error{bot.ErrorBadRequest, bot.ErrorForbidden, bot.ErrorUnauthorized, bot.ErrorNotFound, bot.ErrorConflict, bot.ErrorTooManyRequests} {
			if errors.Is(err, k) {
				e.kind = k
				break
			}
		}
	}
	return e
}

// classify scrubs err and marks it for pace.Do: 429 waits retry_after, 5xx and network
// failures are transient, 4xx are final. ctx is the caller's context: an attempt that ran
// out of its own deadline while ctx lives is worth repeating; once ctx ends, nothing is.
func (s scrubber) classify(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return errors.Join(ctx.Err(), s.wrap(err))
	}
	e := s.wrap(err).(*apiError)
	switch e.kind {
	case bot.ErrorTooManyRequests:
		return pace.RetryAfter(e, time.Duration(max(e.retryAfter, 1))*time.Second)
	case bot.ErrorBadRequest, bot.ErrorForbidden, bot.ErrorUnauthorized, bot.ErrorNotFound, bot.ErrorConflict:
		return e
	}
	return pace.Transient(e)
}

// isNotModified reports Telegram's answer to an edit that changes nothing.
func isNotModified(err error) bool {
	return err != nil && strings.Contains(err.Error(), "message is not modified")
}

// isParseError reports Telegram refusing the HTML of a message.
func isParseError(err error) bool {
	return err != nil && strings.Contains(err.Error(), "can't parse entities")
}
