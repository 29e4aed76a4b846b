package state

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// crash ends db as a killed process would: the intake log is not applied to bbolt.
func crash(t *testing.T, db *DB) {
	t.Helper()
	db.mu.Lock()
	defer db.mu.Unlock()
	db.closed = true
	if db.syncTimer != nil {
		db.syncTimer.Stop()
	}
	if err := db.log.f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.db.Close(); err != nil {
		t.Fatal(err)
	}
}

// A message accepted, answered or not, a cursor moved: all of it is there after a crash
// that left it only in the intake log, and the redelivery of an answered message is refused.
func TestIntakeLogIsReplayedAfterACrash(t *testing.T) {
	dir := t.TempDir()
	db, _ := open(t, dir, Limits{})
	var seqs []uint64
	for i := range 3 {
		seq, err := db.Accept(fmt.Sprint("telegram|1|", i), fmt.Appendf(nil, "msg %d", i))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	if err := db.Done(seqs[1]); err != nil {
		t.Fatal(err)
	}
	if err := db.SetCursor("telegram.offset", "42"); err != nil {
		t.Fatal(err)
	}
	crash(t, db)

	db, logs := open(t, dir, Limits{})
	defer db.Close()
	assertPending(t, db, []string{"msg 0", "msg 2"})
	if _, err := db.Accept("telegram|1|1", nil); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("redelivery of an answered message after the crash = %v; want ErrDuplicate", err)
	}
	if v, ok, _ := db.Cursor("telegram.offset"); !ok || v != "42" {
		t.Fatalf("cursor after the crash = %q %v", v, ok)
	}
	if seq, _ := db.Accept("", []byte("next")); seq <= seqs[2] {
		t.Fatalf("seq after the crash = %d; want past %d", seq, seqs[2])
	}
	if !strings.Contains(logs.String(), "applied the intake log") {
		t.Fatalf("no word of the replay in the log: %q", logs.String())
	}
}

// A record cut short by the crash (the write was not finished, so its caller was not
// told it was stored) is dropped; those before it stay, and the log goes on after it.
func TestTornRecordIsDropped(t *testing.T) {
	dir := t.TempDir()
	db, _ := open(t, dir, Limits{})
	if _, err := db.Accept("a", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	start := db.log.off
	if _, err := db.Accept("b", []byte("torn")); err != nil {
		t.Fatal(err)
	}
	end := db.log.off
	crash(t, db)
	f, err := os.OpenFile(filepath.Join(dir, LogName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, (end-start)/2), start+(end-start)/2); err != nil {
		t.Fatal(err)
	}
	f.Close()

	db, _ = open(t, dir, Limits{})
	assertPending(t, db, []string{"kept"})
	if _, err := db.Accept("b", []byte("again")); err != nil {
		t.Fatalf("the torn message's redelivery = %v; want it accepted", err)
	}
	crash(t, db)
	db, _ = open(t, dir, Limits{})
	defer db.Close()
	assertPending(t, db, []string{"kept", "again"})
}

// A damaged record with whole records after it is not a crash's torn end (a crash tears
// only the end): it alone is skipped, the messages accepted after it are still answered,
// a message answered after it is not answered again, and the admin is told where it was.
func TestDamagedRecordInTheMiddleKeepsTheRecordsAfterIt(t *testing.T) {
	for name, c := range map[string]struct {
		body []byte
		at   func(start, end int64) int64
	}{
		"body":   {[]byte("damaged"), func(start, end int64) int64 { return end - 3 }}, // its checksum fails
		"length": {[]byte("damaged"), func(start, _ int64) int64 { return start + 5 }}, // where the next record starts is unknown
		// The next record is further on than one piece of the search.
		"long body": {bytes.Repeat([]byte("damaged "), 20000), func(start, _ int64) int64 { return start + 5 }},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			db, _ := open(t, dir, Limits{})
			seqA, err := db.Accept("a", []byte("before"))
			if err != nil {
				t.Fatal(err)
			}
			start := db.log.off
			if _, err := db.Accept("b", c.body); err != nil {
				t.Fatal(err)
			}
			end := db.log.off
			if _, err := db.Accept("c", []byte("after")); err != nil {
				t.Fatal(err)
			}
			if err := db.Done(seqA); err != nil {
				t.Fatal(err)
			}
			if err := db.SetCursor("telegram.offset", "43"); err != nil {
				t.Fatal(err)
			}
			crash(t, db)
			f, err := os.OpenFile(filepath.Join(dir, LogName), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte{0xA5}, c.at(start, end)); err != nil {
				t.Fatal(err)
			}
			f.Close()

			db, logs := open(t, dir, Limits{})
			defer db.Close()
			assertPending(t, db, []string{"after"})
			if _, err := db.Accept("a", nil); !errors.Is(err, ErrDuplicate) {
				t.Fatalf("redelivery of the message answered after the damage = %v; want ErrDuplicate", err)
			}
			if v, _, _ := db.Cursor("telegram.offset"); v != "43" {
				t.Fatalf("cursor = %q; want the one set after the damage", v)
			}
			l := logs.String()
			for _, want := range []string{"level=ERROR", "file=" + filepath.Join(dir, LogName), fmt.Sprintf("offset=%d", start), "records_after=3"} {
				if !strings.Contains(l, want) {
					t.Fatalf("the log lacks %q:\n%s", want, l)
				}
			}
		})
	}
}

// Random accepts, redeliveries, dones, cursor moves, crashes and clean restarts, with a log
// small enough to be applied and started again many times: after every restart the state
// is what was acknowledged, whatever records of earlier epochs the file still holds.
func TestIntakeLogMatchesAModelAcrossCrashes(t *testing.T) {
	dir := t.TempDir()
	lim := Limits{LogSize: 1024, DedupMax: 1000}
	db, _ := open(t, dir, lim)
	defer func() { db.Close() }()
	r := rand.New(rand.NewPCG(1, 2))
	type entry struct {
		seq  uint64
		body string
	}
	var pending []entry
	accepted := map[string]bool{}
	cursor := ""
	restarts := 0
	for i := range 3000 {
		switch n := r.IntN(100); {
		case n < 45:
			key := fmt.Sprint("k", r.IntN(i+1))
			body := fmt.Sprintf("m%d-%s", i, string(make([]byte, r.IntN(300))))
			seq, err := db.Accept(key, []byte(body))
			if accepted[key] {
				if !errors.Is(err, ErrDuplicate) {
					t.Fatalf("step %d: redelivery of %s = %v", i, key, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			accepted[key] = true
			pending = append(pending, entry{seq, body})
		case n < 85:
			if len(pending) == 0 {
				continue
			}
			k := r.IntN(len(pending))
			if err := db.Done(pending[k].seq); err != nil {
				t.Fatal(err)
			}
			pending = slices.Delete(pending, k, k+1)
		case n < 98:
			cursor = fmt.Sprint(i)
			if err := db.SetCursor("c", cursor); err != nil {
				t.Fatal(err)
			}
		default:
			if r.IntN(2) == 0 {
				crash(t, db)
			} else if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db, _ = open(t, dir, lim)
			restarts++
			want := make([]string, len(pending))
			for j, e := range pending {
				want[j] = e.body
			}
			assertPending(t, db, want)
			if v, _, _ := db.Cursor("c"); v != cursor {
				t.Fatalf("step %d: cursor %q; want %q", i, v, cursor)
			}
		}
	}
	if checkpoints := db.log.epoch; restarts < 30 || checkpoints < uint64(restarts)+100 {
		t.Fatalf("only %d restarts and %d checkpoints: the test did not exercise the log", restarts, checkpoints)
	}
}

func assertPending(t *testing.T, db *DB, want []string) {
	t.Helper()
	got, err := db.Pending()
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for i, e := range got {
		bodies = append(bodies, string(e.Body))
		if i > 0 && e.Seq <= got[i-1].Seq {
			t.Fatalf("pending out of order: %d after %d", e.Seq, got[i-1].Seq)
		}
	}
	if !slices.Equal(bodies, want) && !(len(bodies) == 0 && len(want) == 0) {
		t.Fatalf("pending = %q\nwant      %q", bodies, want)
	}
}

func syncs(db *DB) (int, bool) {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.log.syncs, db.log.unsynced
}

// acceptThenDone opens a state, accepts one message and answers it; it returns the state
// (closed when the test ends) and the syncs made before the Done.
func acceptThenDone(t *testing.T) (*DB, int) {
	t.Helper()
	db, _ := open(t, t.TempDir(), Limits{})
	t.Cleanup(func() { db.Close() })
	seq, err := db.Accept("a", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	before, _ := syncs(db)
	if err := db.Done(seq); err != nil {
		t.Fatal(err)
	}
	return db, before
}

// A Done is written at once but synced with the next Accept: one sync a message, not two.
func TestDoneIsSyncedWithTheNextAccept(t *testing.T) {
	db, before := acceptThenDone(t)
	if _, err := db.Accept("b", []byte("two")); err != nil {
		t.Fatal(err)
	}
	after, unsynced := syncs(db)
	if after-before > 1 || unsynced {
		t.Fatalf("a Done and an Accept took %d syncs (unsynced left: %v); want one for both", after-before, unsynced)
	}
	assertPending(t, db, []string{"two"})
}

// A Done with nothing after it is synced by the timer, soon.
func TestLoneDoneIsSyncedSoon(t *testing.T) {
	db, before := acceptThenDone(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, unsynced := syncs(db)
		if !unsynced {
			if n != before+1 {
				t.Fatalf("%d syncs for a lone Done; want 1", n-before)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("a lone Done was never synced")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Dones that keep coming closer together than the window, with no Accept between them, are
// still synced within it: the window is not put off by each new Done.
func TestStreamOfDonesIsSyncedWithinTheWindow(t *testing.T) {
	db, _ := open(t, t.TempDir(), Limits{})
	defer db.Close()
	var seqs []uint64
	for i := range 500 {
		seq, err := db.Accept(fmt.Sprint("k", i), []byte("m"))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	before, _ := syncs(db)
	for _, seq := range seqs {
		if err := db.Done(seq); err != nil {
			t.Fatal(err)
		}
		if n, _ := syncs(db); n > before {
			return
		}
		time.Sleep(doneSyncWithin / 5)
	}
	t.Fatalf("%d Dones %v apart over %v and none synced", len(seqs), doneSyncWithin/5, time.Duration(len(seqs))*doneSyncWithin/5)
}

// places is what Pending says of each entry's placement, by body.
func places(t *testing.T, db *DB) map[string]string {
	t.Helper()
	got, err := db.Pending()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range got {
		out[string(e.Body)] = e.Place
	}
	return out
}

// Where an answer showed when the process died comes back with its message: from the
// intake log after a crash, from the state file after a checkpoint, the latest one told;
// and it leaves with the message's Done, also from the state file.
func TestPlacementSurvivesACrashUntilDone(t *testing.T) {
	dir := t.TempDir()
	db, _ := open(t, dir, Limits{})
	a, err := db.Accept("k|a", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Accept("k|b", []byte("b")); err != nil {
		t.Fatal(err)
	}
	if err := db.Place(a, "101"); err != nil {
		t.Fatal(err)
	}
	crash(t, db) // only in the log, and not synced: a crash of the process keeps the write

	db, _ = open(t, dir, Limits{}) // the open applied the log: now in the state file
	if got := places(t, db); got["a"] != "101" || got["b"] != "" {
		t.Fatalf("placements after a crash = %q; want a at 101, b nowhere", got)
	}
	if err := db.Place(a, "101,102"); err != nil { // the log's, over the state file's
		t.Fatal(err)
	}
	if got := places(t, db)["a"]; got != "101,102" {
		t.Fatalf("placement before the checkpoint = %q; want the latest", got)
	}
	if err := db.Close(); err != nil { // a checkpoint
		t.Fatal(err)
	}

	db, _ = open(t, dir, Limits{})
	if got := places(t, db)["a"]; got != "101,102" {
		t.Fatalf("placement after a checkpoint = %q; want the latest", got)
	}
	if err := db.Done(a); err != nil {
		t.Fatal(err)
	}
	if err := db.Place(a, "103"); err != nil { // a late report of a stream that ended
		t.Fatal(err)
	}
	crash(t, db)

	db, _ = open(t, dir, Limits{})
	defer db.Close()
	if got := places(t, db); len(got) != 1 || got["b"] != "" {
		t.Fatalf("entries after Done = %q; want b alone, with no placement", got)
	}
	var left int
	if err := db.db.View(func(tx *bolt.Tx) error { left = tx.Bucket(bucketPlaces).Stats().KeyN; return nil }); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("the state file keeps %d placements of answered messages", left)
	}
}

// A state file found missing or empty beside an intake log that holds records was lost
// (deleted, emptied by a failed copy): the admin is told in plain words, and the messages
// the log still holds (taken since its last checkpoint, unanswered) are kept, not dropped
// with the rest.
func TestLostStateFileIsReportedAndTheIntakeLogKept(t *testing.T) {
	for name, lose := range map[string]func(path string) error{
		"empty":   func(p string) error { return os.Truncate(p, 0) },
		"missing": os.Remove,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			db, _ := open(t, dir, Limits{})
			if _, err := db.Accept("k0", []byte("answered")); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil { // applied to the state file: the log's next epoch
				t.Fatal(err)
			}
			db, _ = open(t, dir, Limits{})
			seq, err := db.Accept("k1", []byte("unanswered"))
			if err != nil {
				t.Fatal(err)
			}
			if err := db.SetCursor("telegram.offset", "7"); err != nil {
				t.Fatal(err)
			}
			crash(t, db)
			if err := lose(filepath.Join(dir, FileName)); err != nil {
				t.Fatal(err)
			}

			db, logs := open(t, dir, Limits{})
			defer db.Close()
			if !strings.Contains(logs.String(), "the state file was missing or empty") {
				t.Fatalf("the admin is not told the state file was lost; log: %q", logs.String())
			}
			assertPending(t, db, []string{"unanswered"})
			if _, err := db.Accept("k1", nil); !errors.Is(err, ErrDuplicate) {
				t.Fatalf("a redelivery of the kept message = %v; want ErrDuplicate", err)
			}
			if v, _, _ := db.Cursor("telegram.offset"); v != "7" {
				t.Fatalf("cursor = %q; want the one in the log", v)
			}
			if next, err := db.Accept("k2", []byte("new")); err != nil || next <= seq {
				t.Fatalf("next message: seq %d, err %v; want past %d", next, err, seq)
			}
		})
	}
}

// A first start that left an empty state file and an intake log without a record (a disk
// too full to write either) is a first start again, not lost state: no warning.
func TestEmptyStateBesideARecordlessLogIsNotLostState(t *testing.T) {
	dir := t.TempDir()
	for name, size := range map[string]int64{FileName: 0, LogName: 4096} {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	db, logs := open(t, dir, Limits{})
	defer db.Close()
	if strings.Contains(logs.String(), "lost") || strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("a first start was reported as lost state: %q", logs.String())
	}
	if _, err := db.Accept("k", []byte("m")); err != nil {
		t.Fatal(err)
	}
}

// An intake log found cut short or missing beside a state file it was applied to is
// reported in plain words (what it held since is lost); the state file still serves.
func TestTruncatedOrMissingIntakeLogIsReported(t *testing.T) {
	for name, damage := range map[string]func(path string) error{
		"truncated": func(p string) error { return os.Truncate(p, 10) }, // inside its first record
		"emptied":   func(p string) error { return os.Truncate(p, 0) },
		"missing":   os.Remove,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			db, _ := open(t, dir, Limits{})
			if _, err := db.Accept("k0", []byte("kept")); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db, _ = open(t, dir, Limits{})
			if _, err := db.Accept("k1", []byte("in the log only")); err != nil {
				t.Fatal(err)
			}
			crash(t, db)
			if err := damage(filepath.Join(dir, LogName)); err != nil {
				t.Fatal(err)
			}

			db, logs := open(t, dir, Limits{})
			defer db.Close()
			if !strings.Contains(logs.String(), "the intake log") || !strings.Contains(logs.String(), "may go unanswered") {
				t.Fatalf("the admin is not told the intake log was damaged; log: %q", logs.String())
			}
			assertPending(t, db, []string{"kept"})
			if _, err := db.Accept("k2", []byte("new")); err != nil {
				t.Fatalf("does not serve: %v", err)
			}
		})
	}
}

// Opening the state reads the intake log's records and searches the preallocated rest of
// it for more, without holding a copy of the log: a copy made every start held 1 MiB, a
// fifth of the gateway's private memory at ready.
func TestOpeningReadsTheLogWithoutACopyOfIt(t *testing.T) {
	dir := t.TempDir()
	db, _ := open(t, dir, Limits{})
	if _, err := db.Accept("a", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	crash(t, db)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	db, _ = open(t, dir, Limits{})
	runtime.ReadMemStats(&after)
	defer db.Close()
	assertPending(t, db, []string{"hello"})
	if got := after.TotalAlloc - before.TotalAlloc; got > 512<<10 {
		t.Errorf("opening the state allocated %d KB; want at most 512 KB (the log is %d KB)", got>>10, db.log.size>>10)
	}
}
