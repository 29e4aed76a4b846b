package channels

import (
	"context"
	"errors"
	"net/url"
	"strings"
)

// Scrubber removes an adapter's secrets (tokens, signing secrets) from text and errors
// before they are logged or returned. SDKs put tokens in URLs and so in their errors
// (Telegram's bot<TOKEN>/ path), so every error from a platform call passes through Wrap.
type Scrubber struct {
	secrets []string
}

// NewScrubber scrubs the non-empty secrets given, in their plain and URL-escaped forms.
func NewScrubber(secrets ...string) Scrubber {
	var s Scrubber
	for _, v := range secrets {
		if v == "" {
			continue
		}
		s.secrets = append(s.secrets, v)
		if esc := url.PathEscape(v); esc != v {
			s.secrets = append(s.secrets, esc)
		}
		if esc := url.QueryEscape(v); esc != v {
			s.secrets = append(s.secrets, esc)
		}
	}
	return s
}

// String replaces every secret in text with ***.
func (s Scrubber) String(text string) string {
	for _, v := range s.secrets {
		text = strings.ReplaceAll(text, v, "***")
	}
	return text
}

// Wrap returns err with every secret scrubbed from its text. The result unwraps only to the
// kinds given (an SDK's sentinel errors, say) and to context cancellation, never to the
// original error, whose text may hold the secret. Wrap of nil is nil, and an error Wrap
// already made passes through unchanged.
func (s Scrubber) Wrap(err error, kinds ...error) error {
	if err == nil {
		return nil
	}
	var se *ScrubbedError
	if errors.As(err, &se) {
		return err
	}
	out := &ScrubbedError{msg: s.String(err.Error())}
	for _, k := range append(kinds, context.Canceled, context.DeadlineExceeded) {
		if errors.Is(err, k) {
			out.kinds = append(out.kinds, k)
		}
	}
	return out
}

// ScrubbedError is an error whose text carries no secret.
type ScrubbedError struct {
	msg   string
	kinds []error
}

func (e *ScrubbedError) Error() string   { return e.msg }
func (e *ScrubbedError) Unwrap() []error { return e.kinds }
