package state

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// appendAhead appends data to the file at path as a history store does with a WriteAhead:
// written, not synced, then recorded.
func appendAhead(t *testing.T, db *DB, path, data string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if err := db.WriteAhead(path, fi.Size(), []byte(data)); err != nil {
		t.Fatalf("WriteAhead: %v", err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// A turn's history written ahead costs no sync of its own: the accepted message's sync
// makes it durable, with the Done before it.
func TestAppendWrittenAheadCostsNoSync(t *testing.T) {
	dir := t.TempDir()
	db, _ := open(t, dir, Limits{})
	defer db.Close()
	path := filepath.Join(dir, "sessions", "chat.jsonl")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("{\"type\":\"session\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	seq, err := db.Accept("m1", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	before, _ := syncs(db)
	appendAhead(t, db, path, "{\"q\":\"one\"}\n{\"a\":\"1\"}\n")
	if err := db.Done(seq); err != nil {
		t.Fatal(err)
	}
	if n, unsynced := syncs(db); n != before || !unsynced {
		t.Fatalf("after the history and the Done: %d syncs, unsynced %v; want none yet, both waiting", n-before, unsynced)
	}
	if _, err := db.Accept("m2", []byte("two")); err != nil {
		t.Fatal(err)
	}
	if n, unsynced := syncs(db); n != before+1 || unsynced {
		t.Fatalf("after the next Accept: %d syncs, unsynced %v; want one for all three", n-before, unsynced)
	}
}

// A power cut that lost the file's last pages (its size cut back, or its blocks zeros)
// after the log's sync: the next start writes the turns back from the log, and only them.
func TestAppendWrittenAheadIsRestoredAfterAPowerCut(t *testing.T) {
	for _, loss := range []string{"cut", "zeros"} {
		t.Run(loss, func(t *testing.T) {
			dir := t.TempDir()
			db, _ := open(t, dir, Limits{})
			path := filepath.Join(dir, "sessions", "chat.jsonl")
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			header := "{\"type\":\"session\"}\n"
			if err := os.WriteFile(path, []byte(header), 0o600); err != nil {
				t.Fatal(err)
			}
			turns := []string{"{\"q\":\"one\"}\n{\"a\":\"1\"}\n", "{\"q\":\"two\"}\n{\"a\":\"2\"}\n"}
			for i, turn := range turns {
				seq, err := db.Accept(string(rune('a'+i)), []byte("m"))
				if err != nil {
					t.Fatal(err)
				}
				appendAhead(t, db, path, turn)
				if err := db.Done(seq); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := db.Accept("z", []byte("last")); err != nil { // syncs the log
				t.Fatal(err)
			}
			crash(t, db)
			want := header + strings.Join(turns, "")
			switch loss {
			case "cut":
				if err := os.Truncate(path, int64(len(header))); err != nil {
					t.Fatal(err)
				}
			case "zeros":
				if err := os.WriteFile(path, append([]byte(header), make([]byte, len(want)-len(header))...), 0o600); err != nil {
					t.Fatal(err)
				}
			}

			db, logs := open(t, dir, Limits{})
			defer db.Close()
			if got := readFile(t, path); got != want {
				t.Fatalf("history after the power cut and a start:\n%q\nwant\n%q", got, want)
			}
			if !strings.Contains(logs.String(), "history_appends_restored=2") {
				t.Fatalf("the start did not say what it restored:\n%s", logs)
			}
			assertPending(t, db, []string{"last"})
		})
	}
}

// A file removed by hand after the crash is not made again from the log's fragments, and
// one shorter than a record's offset (cut by hand) is left as it is, with a warning.
func TestWriteAheadLeavesFilesChangedByHandAlone(t *testing.T) {
	dir := t.TempDir()
	db, _ := open(t, dir, Limits{})
	gone, cut := filepath.Join(dir, "gone.jsonl"), filepath.Join(dir, "cut.jsonl")
	for _, p := range []string{gone, cut} {
		if err := os.WriteFile(p, []byte("header\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		appendAhead(t, db, p, "turn one\n")
		appendAhead(t, db, p, "turn two\n")
	}
	if _, err := db.Accept("z", []byte("m")); err != nil {
		t.Fatal(err)
	}
	crash(t, db)
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(cut, 3); err != nil {
		t.Fatal(err)
	}

	db, logs := open(t, dir, Limits{})
	defer db.Close()
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Fatalf("a history removed by hand was made again: %v", err)
	}
	if got := readFile(t, cut); got != "hea" {
		t.Fatalf("a history cut by hand = %q; want it left as it was", got)
	}
	if !strings.Contains(logs.String(), "shorter than the intake log says") {
		t.Fatalf("no warning for the cut history:\n%s", logs)
	}
}

// What the log cannot hold ahead is refused, and the caller syncs it itself: a file
// outside the state directory, an append larger than AheadMax, anything after Close.
func TestWriteAheadRefusesWhatItCannotKeep(t *testing.T) {
	dir := t.TempDir()
	db, _ := open(t, dir, Limits{})
	inside := filepath.Join(dir, "sessions", "a.jsonl")
	for name, call := range map[string]func() error{
		"outside":   func() error { return db.WriteAhead(filepath.Join(t.TempDir(), "a.jsonl"), 10, []byte("x\n")) },
		"above":     func() error { return db.WriteAhead(filepath.Join(dir, "..", "a.jsonl"), 10, []byte("x\n")) },
		"too large": func() error { return db.WriteAhead(inside, 10, make([]byte, AheadMax+1)) },
	} {
		if call() == nil {
			t.Errorf("%s: WriteAhead took it", name)
		}
	}
	if err := db.WriteAhead(inside, 10, []byte("x\n")); err != nil {
		t.Fatalf("a file under the state directory: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db.WriteAhead(inside, 12, []byte("y\n")) == nil {
		t.Fatal("WriteAhead took an append after Close")
	}
}
