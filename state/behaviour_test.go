package state_test

import (
	"log/slog"
	"testing"
	"time"

	"gateway/state"
	"gateway/state/statetest"
)

func TestBehaviour(t *testing.T) {
	var dir string
	open := func(t *testing.T, lim state.Limits) statetest.DB {
		db, err := state.Open(dir, lim, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	statetest.Run(t, statetest.Backend{
		Open: func(t *testing.T, lim state.Limits) statetest.DB {
			dir = t.TempDir()
			return open(t, lim)
		},
		Reopen:   open,
		SetClock: func(db statetest.DB, now func() time.Time) { state.SetClock(db.(*state.DB), now) },
	})
}
