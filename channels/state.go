package channels

import "time"

// State is the durable platform state an adapter keeps across restarts: its cursors (the
// Telegram update offset) and bounded sets of keys it must not forget (the Slack threads
// the bot answered in). Every write is durable when it returns. state.DB implements it;
// an adapter given none keeps these in memory, as before, and forgets them on restart.
type State interface {
	// Cursor reads a cursor; false when unset.
	Cursor(name string) (string, bool, error)
	// SetCursor stores a cursor.
	SetCursor(name, value string) error
	// Remember adds key to set (or refreshes its time); the set keeps at most max keys,
	// each for at most age, the oldest forgotten first.
	Remember(set, key string, max int, age time.Duration) error
	// Remembered reports whether key was remembered in set less than age ago.
	Remembered(set, key string, age time.Duration) (bool, error)
}
