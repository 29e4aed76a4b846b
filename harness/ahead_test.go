package harness_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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

// neverSynced takes every append written ahead and never syncs it, as an intake log whose
// lazy sync a power cut came before. It tells what of a file a power cut leaves: the
// appends written ahead since the file's last own sync are lost.
type neverSynced struct {
	mu    sync.Mutex
	since map[string][2]int64 // path → the offsets where its unsynced appends begin and end
}

func (n *neverSynced) WriteAhead(path string, off int64, data []byte) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c, ok := n.since[path]; ok && c[1] == off {
		n.since[path] = [2]int64{c[0], off + int64(len(data))}
	} else { // the file was synced by its own append in between
		n.since[path] = [2]int64{off, off + int64(len(data))}
	}
	return nil
}

// durable is how much of the file at path, size bytes long, a power cut now leaves.
func (n *neverSynced) durable(path string, size int64) int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c, ok := n.since[path]; ok && c[1] == size {
		return c[0]
	}
	return size
}

// powerCutTool takes, when it first runs, what a power cut at that moment leaves of the
// store's directory, and then hangs as a tool the power cut stopped.
type powerCutTool struct {
	sideTool
	dir, file string
	ahead     *neverSynced
	cut       string
	err       error
}

func (p *powerCutTool) Run(ctx context.Context, args json.RawMessage) (string, error) {
	if p.runs.Load() == 0 {
		b, err := os.ReadFile(p.file)
		p.cut, p.err = filepath.Join(filepath.Dir(p.dir), "cut"), err
		if err == nil {
			p.err = os.MkdirAll(p.cut, 0o700)
		}
		if p.err == nil {
			p.err = os.WriteFile(filepath.Join(p.cut, filepath.Base(p.file)), b[:p.ahead.durable(p.file, int64(len(b)))], 0o600)
		}
	}
	return p.sideTool.Run(ctx, args)
}

// A tool step is synced before its tools run: a power cut while a tool does its work (sends
// the mail) leaves the step on disk, and the message answered after the restart does not
// run the tool again, although the chat's other save points are left to the intake log's
// lazy sync.
func TestToolStepSurvivesAPowerCutWhileItsToolRuns(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.SetFunc(func(r openaitest.Request) openaitest.Reply {
		switch last := r.Messages[len(r.Messages)-1]; {
		case last.Role == "user" && last.Content == "hello":
			return openaitest.Reply{Text: "hi"}
		case last.Role == "user":
			return openaitest.Reply{ToolCalls: []openaitest.ToolCall{{ID: "call_send_mail", Name: "send_mail", Arguments: `{}`}}}
		}
		return openaitest.Reply{Text: "answered"}
	})
	dir := filepath.Join(t.TempDir(), "sessions")
	st, err := harness.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	ahead := &neverSynced{since: map[string][2]int64{}}
	st.WriteAheadTo(ahead)
	file, err := harness.FileName("web:cut")
	if err != nil {
		t.Fatal(err)
	}
	mail := &powerCutTool{sideTool: sideTool{name: "send_mail", started: make(chan struct{}), hold: make(chan struct{})},
		dir: dir, file: filepath.Join(dir, file), ahead: ahead}
	opts := harness.SessionOptions{Key: "web:cut", Store: st, Provider: openAI(t, srv), Model: "gpt-test",
		Tools: []harness.Tool{mail}}
	s := openSession(t, opts)
	if _, err := s.Run(context.Background(), "hello", nil); err != nil { // the file's first append, synced
		t.Fatal(err)
	}
	const prompt = "mail Bob"
	defer cutRun(s, prompt, mail.started)()
	if mail.err != nil {
		t.Fatal(mail.err)
	}

	opts.Store, err = harness.OpenStore(mail.cut)
	if err != nil {
		t.Fatal(err)
	}
	res, err := openSession(t, opts).RunAttempt(context.Background(), harness.Attempt{ID: "17", Again: true}, prompt, nil, nil)
	if err != nil || res.Text != "answered" {
		t.Fatalf("answered again: %q %v", res.Text, err)
	}
	if n := mail.runs.Load(); n != 1 {
		t.Fatalf("send_mail ran %d times across the power cut; want once", n)
	}
	reqs := srv.Requests()
	if got, _ := resultOf(reqs[len(reqs)-1], "call_send_mail"); !strings.Contains(got, "interrupted") {
		t.Errorf("after the power cut the model got %q for the call; want that it was interrupted", got)
	}
}
