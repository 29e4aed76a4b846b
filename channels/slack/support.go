package slack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"time"

	slackgo "github.com/slack-go/slack"

	"gateway/channels"
	"gateway/internal/pace"
)

// classify is the Senders' Classify: rate limits carry Slack's Retry-After, server errors and
// network failures are transient, everything else (bad arguments, auth) is final; a
// channel the bot cannot post in is marked channels.ErrNoChat.
func classify(err error) error {
	retry, after := retryable(err)
	switch {
	case !retry:
		if nc := noChannel(err); nc != nil {
			return nc
		}
		return err
	case after > 0:
		return pace.RetryAfter(err, after)
	default:
		return pace.Transient(err)
	}
}

// retryable reports whether err is worth another attempt, and after how long when Slack said.
func retryable(err error) (bool, time.Duration) {
	if err == nil || errors.Is(err, context.Canceled) {
		return false, 0
	}
	if rl, ok := errors.AsType[*slackgo.RateLimitedError](err); ok {
		return true, max(rl.RetryAfter, time.Millisecond)
	}
	if sc, ok := errors.AsType[slackgo.StatusCodeError](err); ok {
		return sc.Code >= 500, 0
	}
	switch slackError(err) {
	case "ratelimited":
		return true, time.Second
	case "internal_error", "fatal_error", "service_unavailable", "request_timeout":
		return true, 0
	case "":
	default:
		return false, 0
	}
	var ne net.Error
	var ue *url.Error
	return errors.As(err, &ne) || errors.As(err, &ue) || errors.Is(err, context.DeadlineExceeded), 0
}

// noChannel is err told in words when Slack refused the call because the bot cannot post in
// the channel, marked channels.ErrNoChat; nil for any other error. The admin reads it (the
// API's answer, the log), so it says what to check, with Slack's code for the details.
func noChannel(err error) error {
	var why string
	switch code := slackError(err); code {
	case "channel_not_found":
		why = "Slack knows no channel by this id that the bot can see: it was deleted, or the app is not in it"
	case "not_in_channel":
		why = "the app is not a member of this channel: invite it there"
	case "is_archived":
		why = "the channel is archived"
	default:
		return nil
	}
	return channels.NoChat(fmt.Errorf("%s (%s)", why, slackError(err)))
}

// slackError is the Slack error code in err ("invalid_auth", "msg_too_long"), or "".
func slackError(err error) string {
	if err == nil {
		return ""
	}
	if se, ok := errors.AsType[slackgo.SlackErrorResponse](err); ok {
		return se.Err
	}
	return ""
}

// claims drops redelivered messages. A key is claimed while its message is handled: a
// redelivery arriving meanwhile waits for the outcome, so that it is dropped when the
// first delivery succeeded and handled when it failed (and was forgotten).
type claims struct {
	seen     *channels.Dedup
	mu       sync.Mutex
	inflight map[string]chan struct{}
}

func newClaims(size int) *claims {
	return &claims{seen: channels.NewDedup(size), inflight: map[string]chan struct{}{}}
}

// claim returns dup=true when key was handled before; otherwise release must be called
// with whether the message was taken.
func (c *claims) claim(ctx context.Context, key string) (release func(ok bool), dup bool, err error) {
	for {
		c.mu.Lock()
		busy, ok := c.inflight[key]
		if !ok {
			if c.seen.Seen(key) {
				c.mu.Unlock()
				return nil, true, nil
			}
			done := make(chan struct{})
			c.inflight[key] = done
			c.mu.Unlock()
			return func(ok bool) {
				c.mu.Lock()
				defer c.mu.Unlock()
				if !ok {
					c.seen.Forget(key)
				}
				delete(c.inflight, key)
				close(done)
			}, false, nil
		}
		c.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// threadSet is the threads the bot answered in (channel:thread_ts): replies there need no
// mention. It is remembered in memory and, with a State, durably, so that a restart does
// not forget it: bounded by threadSetSize and threadAge there too.
type threadSet struct {
	mem *boundedSet
	st  channels.State // nil: memory only
	log *slog.Logger
}

// threadAge is how long a thread is followed after the bot last answered in it (first
// answered since the process started: the time is refreshed once per process).
const threadAge = 30 * 24 * time.Hour

const threadStateSet = "slack.threads"

func (t *threadSet) add(key string) {
	if t.mem.has(key) {
		return
	}
	t.mem.add(key)
	if t.st != nil {
		if err := t.st.Remember(threadStateSet, key, threadSetSize, threadAge); err != nil {
			t.log.Warn("slack: cannot remember durably that the bot answered in a thread; after a restart replies there need a mention", "err", err)
		}
	}
}

func (t *threadSet) has(key string) bool {
	if t.mem.has(key) {
		return true
	}
	if t.st == nil {
		return false
	}
	ok, err := t.st.Remembered(threadStateSet, key, threadAge)
	if err != nil {
		t.log.Warn("slack: cannot read the threads the bot answered in", "err", err)
	}
	if ok {
		t.mem.add(key)
	}
	return ok
}

// boundedSet remembers up to size keys, forgetting the oldest first.
type boundedSet struct{ m *boundedMap[struct{}] }

func newBoundedSet(size int) *boundedSet { return &boundedSet{m: newBoundedMap[struct{}](size)} }

func (s *boundedSet) add(key string) { s.m.put(key, struct{}{}) }

func (s *boundedSet) has(key string) bool {
	_, ok := s.m.get(key)
	return ok
}

// boundedMap keeps up to size entries, forgetting the oldest first.
type boundedMap[V any] struct {
	mu   sync.Mutex
	vals map[string]V
	ring []string
	next int
}

func newBoundedMap[V any](size int) *boundedMap[V] {
	return &boundedMap[V]{vals: make(map[string]V, size), ring: make([]string, size)}
}

// put sets key to v; a key already there keeps its place in the order.
func (m *boundedMap[V]) put(key string, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.vals[key]; ok {
		m.vals[key] = v
		return
	}
	if old := m.ring[m.next]; old != "" {
		delete(m.vals, old)
	}
	m.ring[m.next] = key
	m.next = (m.next + 1) % len(m.ring)
	m.vals[key] = v
}

func (m *boundedMap[V]) get(key string) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.vals[key]
	return v, ok
}
