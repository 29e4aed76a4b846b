package harness

// TODO(harness helper): replace this file with the real implementation; the exported
// signatures below are the contract the gateway codes against.

import "context"

// Store keeps one JSONL history file per session under a directory.
type Store struct{}

// OpenStore opens (creating) the store directory.
func OpenStore(dir string) (*Store, error) { panic("TODO") }

// Close flushes and closes open files.
func (s *Store) Close() error { panic("TODO") }

// Session is one chat's agent. Run is called by one goroutine at a time; Steer, Abort-by-ctx
// and Stats may be called concurrently with Run.
type Session struct{}

// OpenSession loads the session's history from the store (repairing a torn last line).
func OpenSession(opts SessionOptions) (*Session, error) { panic("TODO") }

// Run appends prompt as a user message and runs the agent loop (model call, tools, model
// call, ...) until the model answers without tool calls. Steered messages are injected at
// the next save point. Cancelling ctx aborts: the partial answer is persisted as aborted
// and Result.Aborted is set. Provider failures are retried per the options; the final
// failure is returned as an error whose text is fit to show a user.
func (s *Session) Run(ctx context.Context, prompt string, on func(Update)) (Result, error) {
	panic("TODO")
}

// Steer queues text for the running turn; it reports false when no run is in progress.
func (s *Session) Steer(text string) bool { panic("TODO") }

// Reset starts a fresh history (/new), after session_before_reset allows it.
func (s *Session) Reset(ctx context.Context) error { panic("TODO") }

// Stats summarises the session for /status.
func (s *Session) Stats() Stats { panic("TODO") }

// Stats summarises a session.
type Stats struct {
	Messages int
	Running  bool
	Model    string
	Provider string
}
