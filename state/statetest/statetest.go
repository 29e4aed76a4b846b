// Package statetest is the behaviour every implementation of the gateway's durable state
// must show (journal, dedup window, settings, cursors): the bbolt file of a single node and
// the Postgres state of cluster mode both run Run.
package statetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"gateway/state"
)

// DB is the state under test.
type DB interface {
	state.Journal
	state.Settings
	state.Cursors
	Close() error
}

// Backend opens the state under test.
type Backend struct {
	// Open returns a fresh, empty state with these limits.
	Open func(t *testing.T, lim state.Limits) DB
	// Reopen opens the state Open last returned again, after it was closed (a restart).
	Reopen func(t *testing.T, lim state.Limits) DB
	// SetClock makes db read the time from now.
	SetClock func(db DB, now func() time.Time)
}

// Run runs the suite.
func Run(t *testing.T, b Backend) {
	t.Run("JournalSurvivesReopenInOrder", func(t *testing.T) {
		db := b.Open(t, state.Limits{})
		var seqs []uint64
		for i := range 3 {
			seq, err := db.Accept(fmt.Sprintf("telegram|1|%d", i), fmt.Appendf(nil, "msg %d", i))
			if err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, seq)
		}
		if err := db.Done(seqs[1]); err != nil {
			t.Fatal(err)
		}
		if err := db.Done(1 << 40); err != nil {
			t.Fatalf("Done of an unknown seq = %v; want it ignored", err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		db = b.Reopen(t, state.Limits{})
		defer db.Close()
		got, err := db.Pending()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || string(got[0].Body) != "msg 0" || string(got[1].Body) != "msg 2" || got[0].Seq >= got[1].Seq {
			t.Fatalf("pending after reopen = %+v; want msg 0 then msg 2", got)
		}
		// The dedup window survived too: a redelivery of an answered message is refused.
		if _, err := db.Accept("telegram|1|1", []byte("again")); !errors.Is(err, state.ErrDuplicate) {
			t.Fatalf("redelivery after restart = %v; want ErrDuplicate", err)
		}
		if seq, err := db.Accept("", []byte("no id")); err != nil || seq <= seqs[2] {
			t.Fatalf("Accept without a key = %d, %v", seq, err)
		}
		if _, err := db.Accept("", []byte("no id")); err != nil {
			t.Fatalf("a second Accept without a key = %v; an empty key is not deduplicated", err)
		}
	})
	t.Run("DedupWindowIsBoundedByCountAndAge", func(t *testing.T) {
		db := b.Open(t, state.Limits{DedupMax: 10, DedupAge: time.Hour})
		defer db.Close()
		var mu sync.Mutex
		clock := time.Unix(1_700_000_000, 0)
		b.SetClock(db, func() time.Time { mu.Lock(); defer mu.Unlock(); return clock })
		tick := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
		for i := range 30 {
			tick(time.Second)
			if _, err := db.Accept(fmt.Sprint("k", i), nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.Accept("k29", nil); !errors.Is(err, state.ErrDuplicate) {
			t.Fatal("the newest id was forgotten")
		}
		if _, err := db.Accept("k0", nil); err != nil {
			t.Fatalf("the oldest of 30 ids is still remembered with a window of 10: %v", err)
		}
		tick(2 * time.Hour)
		if _, err := db.Accept("k29", nil); err != nil {
			t.Fatalf("an id older than the window is still refused: %v", err)
		}
	})
	t.Run("ConcurrentRedeliveryIsAcceptedOnce", func(t *testing.T) {
		db := b.Open(t, state.Limits{})
		defer db.Close()
		var wg sync.WaitGroup
		var mu sync.Mutex
		accepted, dups := 0, 0
		for range 8 {
			wg.Go(func() {
				_, err := db.Accept("slack|C1|1700.1", []byte("x"))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					accepted++
				case errors.Is(err, state.ErrDuplicate):
					dups++
				default:
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if accepted != 1 || dups != 7 {
			t.Fatalf("8 deliveries of one message: %d accepted, %d duplicates; want 1 and 7", accepted, dups)
		}
		if p, _ := db.Pending(); len(p) != 1 {
			t.Fatalf("journal holds %d entries; want 1", len(p))
		}
	})
	t.Run("SettingsAndCursorsSurviveReopen", func(t *testing.T) {
		db := b.Open(t, state.Limits{})
		if _, ok, err := db.Setting("telegram:1", "voice"); ok || err != nil {
			t.Fatalf("unset setting = %v, %v", ok, err)
		}
		if _, ok, err := db.Cursor("telegram.offset"); ok || err != nil {
			t.Fatalf("unset cursor = %v, %v", ok, err)
		}
		for _, v := range []string{"on", "off"} { // the second write replaces the first
			if err := db.SetSetting("telegram:1", "voice", v); err != nil {
				t.Fatal(err)
			}
			if err := db.SetCursor("telegram.offset", "4"+v); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.SetSetting("telegram:2", "voice", "on"); err != nil {
			t.Fatal(err)
		}
		db.Close()
		db = b.Reopen(t, state.Limits{})
		defer db.Close()
		if v, ok, err := db.Setting("telegram:1", "voice"); err != nil || !ok || v != "off" {
			t.Fatalf("voice = %q %v %v", v, ok, err)
		}
		if v, ok, _ := db.Cursor("telegram.offset"); !ok || v != "4off" {
			t.Fatalf("cursor = %q %v", v, ok)
		}
		if err := db.DeleteSetting("telegram:1", "voice"); err != nil {
			t.Fatal(err)
		}
		if err := db.DeleteSetting("telegram:1", "never-set"); err != nil {
			t.Fatalf("deleting an unset setting = %v", err)
		}
		if _, ok, _ := db.Setting("telegram:1", "voice"); ok {
			t.Fatal("deleted setting still there")
		}
		if v, ok, _ := db.Setting("telegram:2", "voice"); !ok || v != "on" {
			t.Fatalf("another chat's setting = %q %v", v, ok)
		}
	})
}
