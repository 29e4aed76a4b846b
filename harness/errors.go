package harness

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ProviderError is a failed model call. Its Error text names what went wrong and what to
// do, and never carries a secret. It is written for the person in the chat, except where
// AdminFault: then it names the config key to check, for the admin's log, and the chat is
// told in other words (gateway/turn.go).
type ProviderError struct {
	Provider string
	// Status is the HTTP status of the answer, 0 when there was none.
	Status int
	// Message is what the provider said about the failure (secrets removed), may be empty.
	Message string
	// Timeout is set when the provider did not answer in time.
	Timeout bool
	// Unreachable is set when no answer came because the provider could not be reached
	// (connection refused or reset, no route, DNS); DNS says the host name did not resolve.
	// The user reads "could not reach", never "busy": waiting will not help a wrong address.
	Unreachable bool
	DNS         bool
	// Midway is set when the answer broke off after part of it had been streamed.
	Midway bool
	// Overflow is set when the provider said the conversation is too long for the model's
	// context window (the session compacts and retries once before this reaches a user).
	Overflow bool
	// Alone is set, with Overflow, when the user's newest message did not fit even sent
	// without the rest of the conversation: /new would not help, a shorter message would.
	Alone bool
	// Quota is set when the account has no quota or credit left (OpenAI's 429
	// insufficient_quota): waiting and retrying will not help, the admin must act.
	Quota bool
	// NoModel is set when no model is configured (llm.model is empty): no request was
	// sent, and only the admin can mend it.
	NoModel bool
	// Attempts is how many calls were made before giving up (set by the session).
	Attempts int
	// Err is the underlying cause, with secrets removed.
	Err error
}

func (e *ProviderError) Error() string {
	var b strings.Builder
	switch {
	case e.NoModel:
		return "No model is configured, so no request was sent: set llm.model (in the config, or in the profile's profile.yaml)."
	case e.Overflow && e.Alone:
		return "Your message is too long for this model to read, even on its own. Please send it shorter, or in parts."
	case e.Overflow:
		return "This conversation has grown too long for the model, even after I summarised the older part. " +
			"Send /new to start a fresh conversation (or /compact to try summarising again)."
	case e.Quota:
		b.WriteString("The model API refused the request: the account has used up its quota or credit (check the plan and billing of llm.api_key)")
		if e.Message != "" {
			b.WriteString(": ")
			b.WriteString(e.Message)
		}
		if !strings.HasSuffix(b.String(), ".") {
			b.WriteString(".")
		}
		return b.String()
	case e.Status == http.StatusUnauthorized:
		fmt.Fprintf(&b, "The model API rejected the API key (HTTP %d). Check llm.api_key.", e.Status)
		return b.String()
	case e.Status == http.StatusForbidden:
		// Not always the key: a region the API does not serve, a model the account may not
		// use, a proxy's rule. What the API said tells which.
		b.WriteString("The model API refused access (HTTP 403)")
		if e.Message != "" {
			b.WriteString(": ")
			b.WriteString(strings.TrimSuffix(e.Message, "."))
		}
		b.WriteString(". Check llm.api_key and what its account may use.")
		return b.String()
	case e.Status == http.StatusNotFound:
		b.WriteString("The model API answered HTTP 404 (check llm.base_url and llm.model)")
	case e.Status >= 400 && e.Status < 500 && e.Status != http.StatusTooManyRequests && e.Status != http.StatusRequestTimeout:
		fmt.Fprintf(&b, "The model API rejected the request (HTTP %d)", e.Status)
	case e.Midway:
		b.WriteString("The model stopped answering midway")
	case e.Status != 0:
		fmt.Fprintf(&b, "The model provider failed (HTTP %d)", e.Status)
	case e.Timeout:
		b.WriteString("The model provider did not answer in time")
	case e.DNS:
		b.WriteString("I could not reach the model (network error: the name of its server could not be resolved)")
	case e.Unreachable:
		b.WriteString("I could not reach the model (network error)")
	default:
		b.WriteString("The connection to the model provider failed")
	}
	retryable := e.Status == 0 || e.Status == http.StatusTooManyRequests || e.Status == http.StatusRequestTimeout || e.Status >= 500
	if retryable && e.Attempts > 1 {
		fmt.Fprintf(&b, " after %d attempts", e.Attempts)
	}
	if e.Message != "" && !retryable {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	b.WriteString(".")
	switch {
	case e.Unreachable:
		b.WriteString(" Please try again later.")
	case retryable:
		b.WriteString(" Please try again.")
	}
	return b.String()
}

// AdminFault reports a failure only the admin can mend, which the chat's user can do
// nothing about: the key was rejected (401), access refused (403), the account's quota is
// used up, the address or the model does not exist (404), or no model is configured.
func (e *ProviderError) AdminFault() bool {
	return e.NoModel || e.Quota || e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden || e.Status == http.StatusNotFound
}

// errNoModel is the error of a call with no model configured.
func errNoModel(provider string) *ProviderError {
	return &ProviderError{Provider: provider, NoModel: true}
}

// RetryStatus is the status line the chat shows while a failed call waits for its next
// attempt. Only a provider that said so (429, 503) is called busy: a network failure is
// reported as one, so that nobody waits for a model that cannot be reached at all.
func (e *ProviderError) RetryStatus(wait time.Duration) string {
	secs := int(math.Ceil(wait.Seconds()))
	switch {
	case e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable:
		return fmt.Sprintf("The model is busy; retrying in %ds…", secs)
	case e.Status != 0:
		return fmt.Sprintf("The model provider failed (HTTP %d); retrying in %ds…", e.Status, secs)
	case e.Timeout:
		return fmt.Sprintf("The model did not answer in time; retrying in %ds…", secs)
	case e.Unreachable:
		return fmt.Sprintf("I could not reach the model (network error); retrying in %ds…", secs)
	default:
		return fmt.Sprintf("The connection to the model provider failed; retrying in %ds…", secs)
	}
}

func (e *ProviderError) Unwrap() error { return e.Err }

// Retry policy. A server's Retry-After is honoured but no single wait exceeds maxRetryWait,
// so a turn never hangs on a provider that asks for minutes.
const (
	defaultMaxRetries = 3
	baseRetryWait     = 500 * time.Millisecond
	maxRetryWait      = 30 * time.Second
)

// retryWait is how long to wait before attempt n+1 (n counts from 1): the server's wish when
// it gave one, else exponential backoff with jitter; always capped.
func retryWait(n int, serverWait time.Duration, jitter func() float64) time.Duration {
	if serverWait > 0 {
		return min(serverWait, maxRetryWait)
	}
	d := baseRetryWait << min(n-1, 10)
	d = min(d, maxRetryWait)
	// Full jitter on the upper half keeps clients that failed together from retrying together.
	return d/2 + time.Duration(float64(d/2)*jitter())
}

// parseRetryAfter reads retry-after-ms (milliseconds) or Retry-After (seconds or an HTTP
// date). It returns 0 when the header is absent or unusable.
func parseRetryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := strings.TrimSpace(h.Get("retry-after-ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// retryableStatus reports whether an HTTP status is worth another attempt.
func retryableStatus(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusRequestTimeout || status >= 500
}

// classify turns an error from an SDK call into what the session's retry loop expects:
// a *RetryableError around a *ProviderError for transient failures, a *ProviderError for
// final ones, and ctx errors as they are (the session tells abort from timeout).
func classify(provider string, ctx context.Context, status int, header http.Header, message string, err error, redact func(string) string) error {
	if status == 0 && ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
		return ctx.Err()
	}
	pe := &ProviderError{Provider: provider, Status: status, Message: redact(clip(message, 300)), Err: redactedError{err, redact}}
	if status != 0 {
		if retryableStatus(status) {
			return &RetryableError{Err: pe, RetryAfter: parseRetryAfter(header, time.Now())}
		}
		return pe
	}
	var ne net.Error
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		pe.Timeout = true
	case errors.As(err, &dnsErr):
		pe.Unreachable, pe.DNS = true, true
	case unreachable(err):
		pe.Unreachable = true
	}
	// Without a status the call failed on the way (refused, reset, DNS, broken stream):
	// all worth another try.
	return &RetryableError{Err: pe}
}

// unreachable reports failures to connect at all, as opposed to a stream that broke off.
func unreachable(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.ECONNRESET)
}

// redactedError hides secrets in an underlying error's text.
type redactedError struct {
	err    error
	redact func(string) string
}

func (e redactedError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.redact(e.err.Error())
}
func (e redactedError) Unwrap() error { return e.err }

// RedactError is err with every occurrence of the secrets (as written or query-escaped,
// those of 4 bytes or more) replaced by ***; errors.Is and As still see err. nil stays nil.
func RedactError(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	return redactedError{err, redactor(secrets...)}
}

// URLSecrets are what a URL may carry as a secret: its user info's password and its
// query's values (a key in ?key=). Errors quote the URL of a failed call.
func URLSecrets(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	var out []string
	if p, ok := u.User.Password(); ok {
		out = append(out, p)
	}
	for _, vs := range u.Query() {
		out = append(out, vs...)
	}
	return out
}

// redactor returns a func that replaces every occurrence of the secrets with ***.
func redactor(secrets ...string) func(string) string {
	var olds []string
	for _, s := range secrets {
		if len(s) >= 4 { // a tiny "secret" would mangle ordinary text
			olds = append(olds, s, "***")
			if esc := url.QueryEscape(s); esc != s {
				olds = append(olds, esc, "***")
			}
		}
	}
	if len(olds) == 0 {
		return func(s string) string { return s }
	}
	r := strings.NewReplacer(olds...)
	return r.Replace
}

// clip shortens s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
