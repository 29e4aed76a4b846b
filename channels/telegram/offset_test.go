package telegram_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/channels/channeltest"
	"gateway/channels/telegram"
	"gateway/channels/telegram/telegramtest"
	"gateway/state"
)

// An offset saved by an earlier version (a shorter file, here with a stray tail) is
// honoured, and saving over it leaves a file that the next start reads.
func TestOffsetFromAnEarlierFormatIsHonouredAndRewritten(t *testing.T) {
	f := newFixture(t)
	f.srv.HoldConfirm(true) // only the saved offset keeps old updates from coming again
	old, _ := f.srv.Send(telegramtest.Update{ChatID: 1001, Text: "already handled"})
	dir := filepath.Join(f.dir, "telegram")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	legacy := `{"bot_id":` + strconv.Itoa(telegramtest.BotID) + `,"offset":` + strconv.FormatInt(old+1, 10) + "}" +
		"                                                                      \n"
	if err := os.WriteFile(filepath.Join(dir, "offset.json"), []byte(legacy), 0o600); err != nil {
		t.Fatal(err)
	}

	sink := channeltest.NewSink()
	ch := f.start(f.config(), f.options(), sink)
	f.srv.Send(telegramtest.Update{ChatID: 1001, Text: "new"})
	if m := sink.Next(t); m.Text() != "new" {
		t.Fatalf("got %q; want only the message after the saved offset", m.Text())
	}
	sink.ExpectNone(t, 200*time.Millisecond)
	stop(t, ch)

	restartSeesOnlyNewer(t, f, f.options())
}

// With a State, an offset file left by an earlier version is moved in once (stored as the
// cursor, the file removed), and from then on the offset lives in the state file only.
func TestOffsetFileMovesIntoTheStateFile(t *testing.T) {
	f := newFixture(t)
	f.srv.HoldConfirm(true) // only the saved offset keeps old updates from coming again
	old, _ := f.srv.Send(telegramtest.Update{ChatID: 1001, Text: "already handled"})
	dir := filepath.Join(f.dir, "telegram")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "offset.json")
	legacy := `{"bot_id":` + strconv.Itoa(telegramtest.BotID) + `,"offset":` + strconv.FormatInt(old+1, 10) + "}\n"
	if err := os.WriteFile(file, []byte(legacy), 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := state.Open(filepath.Join(f.dir, "state"), state.Limits{}, f.logs.Logger())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	opts := f.options()
	opts.State = db

	sink := channeltest.NewSink()
	ch := f.start(f.config(), opts, sink)
	f.srv.Send(telegramtest.Update{ChatID: 1001, Text: "new"})
	if m := sink.Next(t); m.Text() != "new" {
		t.Fatalf("got %q; want only the message after the migrated offset", m.Text())
	}
	sink.ExpectNone(t, 200*time.Millisecond)
	stop(t, ch)
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("the offset file is still there (%v); it should have moved into the state file", err)
	}
	if v, ok, _ := db.Cursor("telegram.offset"); !ok || !strings.Contains(v, `"offset":`) {
		t.Fatalf("cursor = %q %v", v, ok)
	}

	restartSeesOnlyNewer(t, f, opts)
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatal("an offset file was written again")
	}
}

// countingState counts the cursor writes that reach the state.
type countingState struct {
	*state.DB
	mu     sync.Mutex
	writes int
}

func (s *countingState) SetCursor(name, value string) error {
	s.mu.Lock()
	s.writes++
	s.mu.Unlock()
	return s.DB.SetCursor(name, value)
}

// The offset is a synced write: it is saved at most about once a second while updates
// stream in, not once per batch, and the last one is saved when polling stops, so a
// restart still starts after everything taken.
func TestOffsetIsSavedAtMostOnceASecondAndWhenPollingStops(t *testing.T) {
	f := newFixture(t)
	f.srv.HoldConfirm(true) // only the saved offset keeps old updates from coming again
	db, err := state.Open(filepath.Join(f.dir, "state"), state.Limits{}, f.logs.Logger())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st := &countingState{DB: db}
	opts := f.options()
	opts.State = st

	sink := channeltest.NewSink()
	began := time.Now()
	ch := f.start(f.config(), opts, sink)
	const n = 30
	for i := range n {
		f.srv.Send(telegramtest.Update{ChatID: 1001, Text: fmt.Sprint("m", i)})
		if m := sink.Next(t); m.Text() != fmt.Sprint("m", i) {
			t.Fatalf("got %q; want m%d", m.Text(), i)
		}
	}
	stop(t, ch)
	st.mu.Lock()
	writes := st.writes
	st.mu.Unlock()
	if most := int(time.Since(began)/time.Second) + 2; writes > most || writes < 1 {
		t.Fatalf("%d offset writes for %d batches in %v; want 1 to %d", writes, n, time.Since(began).Round(time.Millisecond), most)
	}

	restartSeesOnlyNewer(t, f, opts)
}

// restartSeesOnlyNewer starts the channel again with opts: only a message sent after the
// restart comes, nothing from before the saved offset.
func restartSeesOnlyNewer(t *testing.T, f *fixture, opts telegram.Options) {
	t.Helper()
	sink := channeltest.NewSink()
	f.start(f.config(), opts, sink)
	f.srv.Send(telegramtest.Update{ChatID: 1001, Text: "newer"})
	if m := sink.Next(t); m.Text() != "newer" {
		t.Fatalf("after a restart got %q; want only the newest message", m.Text())
	}
	sink.ExpectNone(t, 200*time.Millisecond)
}
