// Package profiles holds the profiles admins define (system prompt, model, voice, tools,
// hooks) and the bindings that route a chat to one of them.
package profiles

import (
	"time"

	"gateway/harness"
)

// Config is the `profiles:` config section.
type Config struct {
	Dir     string `mapstructure:"dir" json:"dir"`
	Default string `mapstructure:"default" json:"default"`
}

// Match selects chats for a binding; empty fields match anything.
type Match struct {
	Channel string `mapstructure:"channel" json:"channel,omitempty"`
	Chat    string `mapstructure:"chat" json:"chat,omitempty"`
	Thread  string `mapstructure:"thread" json:"thread,omitempty"`
	User    string `mapstructure:"user" json:"user,omitempty"`
}

// Binding routes matching chats to a profile.
type Binding struct {
	Profile string `mapstructure:"profile" json:"profile"`
	Match   Match  `mapstructure:"match" json:"match"`
}

// Profile is one configured persona of the gateway.
type Profile struct {
	Name   string
	Dir    string // "" for the built-in default
	System string // SYSTEM.md
	// LLM overrides the global llm section field by field (zero fields inherit).
	LLM       harness.Config
	QueueMode string // followup (default) | steer | collect | interrupt
	Tools     []string
	// Voice overrides.
	TTSMode   string
	TTSVoice  string
	Language  string
	IdleReset time.Duration // start a fresh history after this long without messages (0: never)
	HooksDir  string        // Dir/hooks when it exists
}

// DefaultSystemPrompt is the built-in default profile's system prompt.
const DefaultSystemPrompt = "You are a helpful assistant talking with people in a chat app. Answer clearly and concisely; use Markdown sparingly."

// Set is an immutable set of loaded profiles and bindings; a reload builds a new Set.
type Set struct {
	byName   map[string]*Profile
	bindings []Binding
	def      string
}

// Resolve returns the profile for a chat: the most specific matching binding, else the default.
func (s *Set) Resolve(channel, chat, thread, user string) *Profile {
	best, bestScore := "", -1
	for _, b := range s.bindings {
		score, ok := b.Match.score(channel, chat, thread, user)
		if ok && score > bestScore {
			best, bestScore = b.Profile, score
		}
	}
	if p, ok := s.byName[best]; ok {
		return p
	}
	return s.byName[s.def]
}

// score ranks how specific a match is: user > thread > chat > channel.
func (m Match) score(channel, chat, thread, user string) (int, bool) {
	score := 0
	for _, f := range []struct {
		want, got string
		weight    int
	}{{m.Channel, channel, 1}, {m.Chat, chat, 2}, {m.Thread, thread, 4}, {m.User, user, 8}} {
		if f.want == "" {
			continue
		}
		if f.want != f.got {
			return 0, false
		}
		score += f.weight
	}
	return score, true
}

// Get returns the named profile or nil.
func (s *Set) Get(name string) *Profile { return s.byName[name] }

// Default returns the default profile.
func (s *Set) Default() *Profile { return s.byName[s.def] }

// Builtin returns a set with only the built-in default profile (no profiles directory).
func Builtin(name string) *Set {
	if name == "" {
		name = "assistant"
	}
	return &Set{byName: map[string]*Profile{name: {Name: name, System: DefaultSystemPrompt}}, def: name}
}
