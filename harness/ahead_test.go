package harness_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"gateway/harness"
	"gateway/harness/openaitest"
	"gateway/state"
)

// powerCut copies what a power cut would leave of dir: the state files as last synced (the
// log was synced by an Accept), and each history file cut back to keep bytes.
func powerCut(t *testing.T, dir string, keep map[string]int64) string {
	t.Helper()
	out := t.TempDir()
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if n, ok := keep[rel]; ok {
			b = b[:n]
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(out, rel)), 0o700); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(out, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// With the intake log as the history's write-ahead, a turn saved without a sync of its own
// is still there after a power cut that lost the history file's last pages: the model is
// asked with the whole conversation after the start.
func TestHistoryWrittenAheadSurvivesAPowerCut(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.Push(openaitest.Reply{Text: "first answer"}, openaitest.Reply{Text: "second answer"}, openaitest.Reply{Text: "third answer"})
	dir := t.TempDir()
	open := func(dir string) (*state.DB, *harness.Store) {
		db, err := state.Open(dir, state.Limits{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		st, err := harness.OpenStore(filepath.Join(dir, "sessions"))
		if err != nil {
			t.Fatal(err)
		}
		st.WriteAheadTo(db)
		return db, st
	}
	db, st := open(dir)
	s := openSession(t, harness.SessionOptions{Store: st, Provider: openAI(t, srv), Key: "telegram:42"})
	if _, err := s.Run(context.Background(), "first question", nil); err != nil {
		t.Fatal(err)
	}
	file, err := harness.FileName("telegram:42")
	if err != nil {
		t.Fatal(err)
	}
	rel := filepath.Join("sessions", file)
	fi, err := os.Stat(filepath.Join(dir, rel))
	if err != nil {
		t.Fatal(err)
	}
	firstTurn := fi.Size() // the file's first append makes it, and is synced
	if _, err := s.Run(context.Background(), "second question", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Accept("next", []byte("the next message")); err != nil { // the log's sync
		t.Fatal(err)
	}
	cut := powerCut(t, dir, map[string]int64{rel: firstTurn})
	db.Close()

	db, st = open(cut)
	defer db.Close()
	s = openSession(t, harness.SessionOptions{Store: st, Provider: openAI(t, srv), Key: "telegram:42"})
	if _, err := s.Run(context.Background(), "third question", nil); err != nil {
		t.Fatal(err)
	}
	reqs := srv.Requests()
	var got []string
	for _, m := range reqs[len(reqs)-1].Messages {
		got = append(got, m.Content)
	}
	want := []string{"first question", "first answer", "second question", "second answer", "third question"}
	if !slices.Equal(got, want) {
		t.Fatalf("the model was asked, after the power cut, with %q; want %q", got, want)
	}
}
