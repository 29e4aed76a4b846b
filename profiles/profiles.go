// Package profiles holds the profiles admins define (system prompt, model, voice, tools,
// hooks) and the bindings that route a chat to one of them.
//
// A profile is a directory profiles.dir/NAME/ (see Load). Bindings route chats to profiles; the
// order in which they are matched is documented on Set.Resolve.
package profiles

import (
	"slices"
	"strings"
	"time"

	"gateway/harness"
	"gateway/harness/mcptools"
)

// Config is the `profiles:` config section.
type Config struct {
	Dir     string `mapstructure:"dir" json:"dir"`
	Default string `mapstructure:"default" json:"default"`
}

// WithDefaults is c as LoadWith reads it: no default names DefaultName. (No dir: the
// built-in default profile only.)
func (c Config) WithDefaults() Config {
	if c.Default == "" {
		c.Default = DefaultName
	}
	return c
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

// Profile is one configured persona of the gateway. Treat it as read-only: a Set shares it.
type Profile struct {
	Name        string
	Dir         string // "" for the built-in default
	Description string // profile.yaml description, for `gateway profiles list`
	System      string // SYSTEM.md, trimmed; DefaultSystemPrompt when absent or blank
	// LLM overrides the global llm section field by field (zero fields inherit). Only Provider,
	// Model, BaseURL, APIKey and ContextWindow are ever set from profile.yaml.
	LLM       harness.Config
	QueueMode string // followup | steer | collect | interrupt; "" follows sessions.queue_mode
	// TextOnly is set by `vision: false`: the model cannot see, so images are described to
	// it in words (name, type, size) instead of sent.
	TextOnly bool
	// Tools lists the enabled tools. nil: the profile did not say (use the gateway's default set);
	// empty but non-nil (`tools: []`): no tools.
	Tools []string
	// Voice overrides; "" inherits the global stt/tts config.
	TTSMode     string // off | inbound | always
	TTSVoice    string
	Language    string        // stt.language: the spoken-language hint for transcription
	TTSLanguage string        // tts.language, or Language when tts.language is not set
	IdleReset   time.Duration // a chat silent longer than this starts a fresh history (0: never)
	HooksDir    string        // Dir/hooks when it exists
	// MCP are the profile's own MCP servers; their tools reach only its chats.
	MCP []mcptools.ServerConfig
}

// DefaultSystemPrompt is the built-in default profile's system prompt.
const DefaultSystemPrompt = "You are a helpful assistant talking with people in a chat app. Answer clearly and concisely; use Markdown sparingly."

// Set is an immutable set of loaded profiles and bindings; a reload builds a new Set.
type Set struct {
	byName   map[string]*Profile
	bindings []Binding
	def      string
}

// Resolve returns the profile for a chat; it never returns nil.
//
// Resolution order: a binding matches when every non-empty field of its Match equals the chat's
// value. Among matching bindings the most specific wins, scored by summing the weights of its set
// fields: user 8, thread 4, chat 2, channel 1 (so any user binding beats any binding without a user,
// a thread binding beats chat+channel, and so on). On equal scores the binding listed first in the
// config wins. A binding with an empty Match matches everything at score 0, still ahead of the
// default. A chat no binding matches gets the default profile (profiles.default).
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

// NamesChat reports whether a binding names chat (on channel, or on any channel).
func (s *Set) NamesChat(channel, chat string) bool {
	for _, b := range s.bindings {
		if b.Match.Chat == chat && (b.Match.Channel == "" || b.Match.Channel == channel) {
			return true
		}
	}
	return false
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
// An empty name means DefaultName.
func Builtin(name string) *Set {
	if name == "" {
		name = DefaultName
	}
	return &Set{byName: map[string]*Profile{name: builtinProfile(name)}, def: name}
}

// Names returns the names of all profiles, sorted.
func (s *Set) Names() []string { return sortedNames(s.byName) }

// Bindings returns a copy of the bindings in config order.
func (s *Set) Bindings() []Binding { return slices.Clone(s.bindings) }

// ProfileInfo describes one profile for `gateway profiles list`.
type ProfileInfo struct {
	Name        string
	Dir         string // "" for the built-in default
	Description string
	Default     bool      // profiles.default names it
	Bindings    []Binding // the bindings that name it, in config order
	HooksDir    string
}

// List describes every profile, sorted by name.
func (s *Set) List() []ProfileInfo {
	out := make([]ProfileInfo, 0, len(s.byName))
	for _, name := range s.Names() {
		p := s.byName[name]
		info := ProfileInfo{Name: name, Dir: p.Dir, Description: p.Description, Default: name == s.def, HooksDir: p.HooksDir}
		for _, b := range s.bindings {
			if b.Profile == name {
				info.Bindings = append(info.Bindings, b)
			}
		}
		out = append(out, info)
	}
	return out
}

// String describes what a match selects, e.g. "channel=telegram chat=123", or "any chat".
func (m Match) String() string {
	var parts []string
	for _, f := range [][2]string{{"channel", m.Channel}, {"chat", m.Chat}, {"thread", m.Thread}, {"user", m.User}} {
		if f[1] != "" {
			parts = append(parts, f[0]+"="+f[1])
		}
	}
	if len(parts) == 0 {
		return "any chat"
	}
	return strings.Join(parts, " ")
}
