package gateway

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/channels"
	"gateway/harness"
)

// fetchChannel is a memChannel whose messages carry media by reference (channels.Fetcher).
type fetchChannel struct {
	*memChannel
	mu    sync.Mutex
	fetch func(ctx context.Context, msg *channels.Message) error
	refs  []string // every Ref Fetch was asked for
}

func newFetchChannel(fetch func(ctx context.Context, msg *channels.Message) error) *fetchChannel {
	return &fetchChannel{memChannel: newMemChannel(), fetch: fetch}
}

func (f *fetchChannel) Name() string { return "fx" }
func (f *fetchChannel) Start(ctx context.Context, sink channels.Sink) error {
	f.sink = sink
	sink.Connected("fx", true, nil)
	return nil
}

func (f *fetchChannel) Fetch(ctx context.Context, msg *channels.Message) error {
	f.mu.Lock()
	for _, p := range msg.Parts {
		if p.Ref != "" {
			f.refs = append(f.refs, p.Ref)
		}
	}
	fetch := f.fetch
	f.mu.Unlock()
	return fetch(ctx, msg)
}

func (f *fetchChannel) asked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.refs...)
}

// photo delivers a message with a photo by reference.
func (f *fetchChannel) photo(t testing.TB, chat, id, ref string) {
	t.Helper()
	err := f.sink.Deliver(context.Background(), &channels.Message{
		ID: id, Channel: "fx", ChatID: chat, UserID: "u" + chat, ChatType: channels.ChatDM,
		Parts: []channels.Part{channels.TextPart("look"), {Type: channels.PartImage, MIME: "image/jpeg", Name: "photo.jpg", Ref: ref}},
	})
	if err != nil {
		t.Fatalf("deliver: %v", err)
	}
}

// A message with media by reference is journaled with its reference and fetched on the
// chat's session before the turn; a fetch cut by shutdown leaves it journaled (the chat is
// told it is answered after the restart), and the next start fetches it again with the same
// reference and answers it once.
func TestReferencedMediaIsJournaledAndFetchedAfterRestart(t *testing.T) {
	dir := t.TempDir()
	db := openState(t, dir)
	defer db.Close()

	started := make(chan struct{}, 1)
	slow := newFetchChannel(func(ctx context.Context, msg *channels.Message) error {
		started <- struct{}{}
		<-ctx.Done() // the platform is slow; shutdown cuts it
		return errors.New("I couldn't download that photo in time.")
	})
	first := newEnvWith(t, filepath.Join(dir, "sessions"), []channels.Channel{slow}, withDurable(db))
	slow.photo(t, "c1", "m1", "file-1")
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the message was never fetched")
	}
	p, _ := db.Pending()
	if len(p) != 1 || !strings.Contains(string(p[0].Body), `"file-1"`) {
		t.Fatalf("journal holds %d entries (%v); want the message with its reference", len(p), p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_ = first.g.Stop(ctx)
	cancel()
	// Not that the download failed: that it is answered after the restart.
	if got := slow.finals("c1"); len(got) != 1 || strings.Contains(got[0], "couldn't download") || !strings.Contains(got[0], "when I'm back") {
		t.Fatalf("the chat was told %q about a fetch cut by shutdown; want only that it is answered after the restart", got)
	}
	if p, _ := db.Pending(); len(p) != 1 {
		t.Fatalf("journal after the cut fetch holds %d messages; want 1", len(p))
	}

	media := filepath.Join(dir, "photo.jpg")
	if err := os.WriteFile(media, []byte("\xff\xd8 photo"), 0o600); err != nil {
		t.Fatal(err)
	}
	fast := newFetchChannel(func(ctx context.Context, msg *channels.Message) error {
		for i, p := range msg.Parts {
			if p.Ref != "" {
				msg.Parts[i].Ref, msg.Parts[i].Path, msg.Parts[i].Size = "", media, 8
			}
		}
		return nil
	})
	model := harness.NewFake()
	model.SetFunc(func(req *harness.Request) harness.FakeReply { return harness.FakeReply{Text: "nice photo"} })
	second := newEnvWith(t, filepath.Join(dir, "sessions"), []channels.Channel{fast}, withDurable(db), func(_ *Config, _ *Runtime, d *Deps) {
		d.NewProvider = func(harness.Config) (harness.Provider, error) { return model, nil }
	})
	_ = second
	fast.waitDone(t, 1)
	if got := fast.finals("c1"); len(got) != 1 || got[0] != "done:nice photo" {
		t.Fatalf("answers after restart %q", got)
	}
	if got := fast.asked(); len(got) != 1 || got[0] != "file-1" {
		t.Fatalf("fetched %q after restart; want the journaled reference once", got)
	}
	if n := len(model.Requests()); n != 1 {
		t.Fatalf("%d model calls; want 1", n)
	}
}

// A fetch that fails is told to the user in the error's words and answers the message: no
// turn runs, it leaves the journal, and the chat's next message is served.
func TestFailedFetchIsToldAndSettled(t *testing.T) {
	dir := t.TempDir()
	db := openState(t, dir)
	defer db.Close()
	const refusal = "That photo is 30 MB; the limit is 20 MB."
	fc := newFetchChannel(func(ctx context.Context, msg *channels.Message) error { return errors.New(refusal) })
	e := newEnvWith(t, filepath.Join(dir, "sessions"), []channels.Channel{fc}, withDurable(db))
	e.fake.SetFunc(func(req *harness.Request) harness.FakeReply { return harness.FakeReply{Text: "ok"} })
	fc.photo(t, "c1", "m1", "big")
	fc.waitDone(t, 1)
	if got := fc.finals("c1"); len(got) != 1 || got[0] != "done:"+refusal {
		t.Fatalf("the chat got %q; want the fetch's refusal", got)
	}
	if n := len(e.fake.Requests()); n != 0 {
		t.Fatalf("the model was called %d times for media that could not be fetched", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := db.Pending()
		if err == nil && len(p) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("journal still holds %d messages after the refusal", len(p))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
