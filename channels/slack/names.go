package slack

import (
	"container/list"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode"

	slackgo "github.com/slack-go/slack"

	"gateway/channels"
)

// Slack events carry only the author's user id; the display name comes from users.info.
// A busy channel must cost one call per user per hour, and a slow or failing Slack must
// not hold up delivery: a message whose author's name is unknown goes without one.
const (
	nameCacheSize  = 5000
	nameTTL        = time.Hour
	nameFailTTL    = time.Minute             // how long a failed lookup is not tried again
	nameTimeout    = 1500 * time.Millisecond // the longest a delivery waits for a name; Slack wants an ack in 3s
	maxNameLookups = 64                      // lookups at once; more messages go without a name
	maxNameRunes   = 80                      // Slack's own limit for display names
)

// names resolves and caches display names by user id. Safe for concurrent use.
type names struct {
	fetch func(ctx context.Context, id string) (*slackgo.User, error)
	now   func() time.Time
	log   *slog.Logger
	scrub channels.Scrubber // keeps tokens out of the log

	mu       sync.Mutex
	entries  map[string]*list.Element // of *nameEntry
	order    *list.List               // oldest first
	inflight map[string]chan struct{} // closed when the lookup of that id ends
	pause    time.Time                // no lookups before then: Slack refused or failed them all
}

type nameEntry struct {
	id      string
	name    string // "" when the lookup failed
	expires time.Time
}

func newNames(fetch func(context.Context, string) (*slackgo.User, error), log *slog.Logger, scrub channels.Scrubber) *names {
	return &names{
		fetch: fetch, now: time.Now, log: log, scrub: scrub,
		entries: map[string]*list.Element{}, order: list.New(), inflight: map[string]chan struct{}{},
	}
}

// get returns the display name of user id, or "" when it is not known within nameTimeout.
// Lookups of the same id at once share one call.
func (n *names) get(ctx context.Context, id string) string {
	ctx, cancel := context.WithTimeout(ctx, nameTimeout)
	defer cancel()
	for {
		n.mu.Lock()
		now := n.now()
		if el, ok := n.entries[id]; ok {
			e := el.Value.(*nameEntry)
			if now.Before(e.expires) {
				n.mu.Unlock()
				return e.name
			}
			n.order.Remove(el)
			delete(n.entries, id)
		}
		if now.Before(n.pause) {
			n.mu.Unlock()
			return ""
		}
		if wait, ok := n.inflight[id]; ok {
			n.mu.Unlock()
			select {
			case <-wait:
				continue // its outcome is cached now, unless its caller gave up
			case <-ctx.Done():
				return ""
			}
		}
		if len(n.inflight) >= maxNameLookups {
			n.mu.Unlock()
			return ""
		}
		done := make(chan struct{})
		n.inflight[id] = done
		n.mu.Unlock()

		name := n.lookup(ctx, id)

		n.mu.Lock()
		delete(n.inflight, id)
		close(done)
		n.mu.Unlock()
		return name
	}
}

// lookup calls users.info once and remembers the outcome: a name for nameTTL, a failure
// for nameFailTTL (or, when it concerns every user, a pause of all lookups).
func (n *names) lookup(ctx context.Context, id string) string {
	u, err := n.fetch(ctx, id)
	if err == nil {
		name := displayNameOf(u)
		n.store(id, name, nameTTL)
		return name
	}
	code := slackError(err)
	switch retry, after := retryable(err); {
	case errors.Is(err, context.Canceled):
		// The message's caller went away (Stop, Slack hung up): nothing was learnt.
		return ""
	case code == "missing_scope" || code == "not_allowed_token_type" || code == "no_permission" ||
		code == "invalid_auth" || code == "not_authed" || code == "token_revoked" || code == "account_inactive":
		n.pauseFor(nameTTL)
		n.log.Warn("slack: cannot look up user names, so messages in channels go without the speaker's name; give the app the users:read scope",
			"slack_error", code)
	case after > 0:
		n.pauseFor(after)
		n.log.Debug("slack: users.info is rate limited; messages go without names for a while", "retry_after", after)
	case retry:
		// Slack is slow or failing: stop asking for everyone, not only this user.
		n.pauseFor(nameFailTTL)
		n.log.Debug("slack: users.info failed; messages go without names for a while", "user", id, "err", n.scrub.Wrap(err))
	default: // user_not_found and the like: about this user only
		n.store(id, "", nameFailTTL)
		n.log.Debug("slack: users.info gave no name", "user", id, "slack_error", code, "err", n.scrub.Wrap(err))
	}
	return ""
}

func (n *names) pauseFor(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pause = n.now().Add(d)
}

// store caches the outcome for id, forgetting the oldest entry when full.
func (n *names) store(id, name string, ttl time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if el, ok := n.entries[id]; ok {
		n.order.Remove(el)
	}
	for n.order.Len() >= nameCacheSize {
		old := n.order.Front()
		n.order.Remove(old)
		delete(n.entries, old.Value.(*nameEntry).id)
	}
	n.entries[id] = n.order.PushBack(&nameEntry{id: id, name: name, expires: n.now().Add(ttl)})
}

// displayNameOf picks the name people see in Slack: the display name, else the real
// name, else the user name. It is kept to one short line, because the gateway puts it
// before the message text.
func displayNameOf(u *slackgo.User) string {
	if u == nil {
		return ""
	}
	for _, s := range []string{u.Profile.DisplayName, u.Profile.RealName, u.RealName, u.Name} {
		if s = cleanName(s); s != "" {
			return s
		}
	}
	return ""
}

func cleanName(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return ' '
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > maxNameRunes {
		s = strings.TrimSpace(string(r[:maxNameRunes]))
	}
	return s
}
