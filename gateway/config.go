// Package gateway is the heart of the daemon: it owns the channels' lifecycle, routes each
// inbound message through the hook bus to a per-chat session actor, runs one turn at a time
// per chat (many chats in parallel) and delivers the answer's frames back to the chat.
package gateway

import (
	"errors"
	"fmt"
	"time"

	"gateway/profiles"
)

// Queue modes: what happens to a message that arrives while its chat's turn is running.
const (
	QueueFollowup  = profiles.QueueFollowup  // run it after the current turn (default)
	QueueSteer     = profiles.QueueSteer     // inject it into the running turn at its next save point
	QueueCollect   = profiles.QueueCollect   // merge everything that arrived into one later turn
	QueueInterrupt = profiles.QueueInterrupt // abort the running turn and answer the newest message
)

// Config is the `sessions:` config section.
type Config struct {
	// MaxConcurrentTurns bounds model turns running at once across all chats.
	MaxConcurrentTurns int `mapstructure:"max_concurrent_turns" json:"max_concurrent_turns"`
	// QueueSize bounds messages waiting per chat; past it the user is told to wait.
	QueueSize int `mapstructure:"queue_size" json:"queue_size"`
	// MaxSessions bounds chats kept in memory; idle ones are evicted first.
	MaxSessions int `mapstructure:"max_sessions" json:"max_sessions"`
	// IdleEvict frees an idle chat's memory after this long (its history stays on disk).
	IdleEvict time.Duration `mapstructure:"idle_evict" json:"idle_evict"`
	// TurnTimeout bounds one turn, tools and retries included.
	TurnTimeout time.Duration `mapstructure:"turn_timeout" json:"turn_timeout"`
	// QueueMode is the default queue mode; profiles may override it.
	QueueMode string `mapstructure:"queue_mode" json:"queue_mode"`
	// EchoTranscript shows the user what was heard in a voice note before answering.
	EchoTranscript bool `mapstructure:"echo_transcript" json:"echo_transcript"`
}

// Defaults returns the configuration used for unset keys.
func Defaults() Config {
	return Config{
		MaxConcurrentTurns: 128,
		QueueSize:          20,
		MaxSessions:        10_000,
		IdleEvict:          15 * time.Minute,
		TurnTimeout:        10 * time.Minute,
		QueueMode:          QueueFollowup,
	}
}

// WithDefaults is c as the gateway runs it: each key that is 0 or empty takes its default.
func (c Config) WithDefaults() Config {
	d := Defaults()
	if c.MaxConcurrentTurns <= 0 {
		c.MaxConcurrentTurns = d.MaxConcurrentTurns
	}
	if c.QueueSize <= 0 {
		c.QueueSize = d.QueueSize
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = d.MaxSessions
	}
	if c.IdleEvict <= 0 {
		c.IdleEvict = d.IdleEvict
	}
	if c.TurnTimeout <= 0 {
		c.TurnTimeout = d.TurnTimeout
	}
	if c.QueueMode == "" {
		c.QueueMode = d.QueueMode
	}
	return c
}

// Validate names every bad key.
func (c Config) Validate() error {
	var errs []error
	if c.QueueMode != "" && !profiles.ValidQueueMode(c.QueueMode) {
		errs = append(errs, fmt.Errorf("sessions.queue_mode: %q is not one of followup, steer, collect, interrupt", c.QueueMode))
	}
	d := Defaults()
	for _, n := range []struct {
		key   string
		v     int64
		deflt string
	}{
		{"max_concurrent_turns", int64(c.MaxConcurrentTurns), fmt.Sprint(d.MaxConcurrentTurns)},
		{"queue_size", int64(c.QueueSize), fmt.Sprint(d.QueueSize)},
		{"max_sessions", int64(c.MaxSessions), fmt.Sprint(d.MaxSessions)},
		{"idle_evict", int64(c.IdleEvict), d.IdleEvict.String()},
		{"turn_timeout", int64(c.TurnTimeout), d.TurnTimeout.String()},
	} {
		if n.v < 0 {
			errs = append(errs, fmt.Errorf("sessions.%s: must not be negative (0 takes the default, %s)", n.key, n.deflt))
		}
	}
	return errors.Join(errs...)
}
