package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/slack/slacktest"
	"gateway/internal/fakeserver"
)

// A file whose download is slow holds up no other chat: its message is handed to the
// gateway (journaled) and acknowledged to Slack at once, and a text from another chat is
// delivered while the download is still held. The file arrives once it is released.
func TestSlowDownloadHoldsUpNoOtherChat(t *testing.T) {
	s := slacktest.New(t)
	st := start(t, s, nil)
	release := s.HoldDownloads(t)
	data := randomBytes(t, 1000)
	s.Send(slacktest.UserMessage{Channel: "D30", User: user, Text: "see this", Files: []slacktest.UserFile{{Name: "report.pdf", MIME: "application/pdf", Data: data}}})
	eventually(t, "the download to start", func() bool { return len(s.Calls("files.download")) == 1 })
	if n := st.sink.deliveries(); n != 1 {
		t.Fatalf("%d messages handed to the gateway while the download is held; want the file's message, handed over before its download", n)
	}
	eventually(t, "the envelope to be acknowledged", func() bool {
		env := s.Envelopes()
		return len(env) == 1 && env[0].Acked
	})

	s.DM("D31", user, "anyone there?")
	if m := st.sink.Next(t); m.ChatID != "D31" || m.Text() != "anyone there?" {
		t.Fatalf("delivered %q in %s; want the other chat's text while the download is held", m.Text(), m.ChatID)
	}
	release()
	m := st.sink.Next(t)
	if m.ChatID != "D30" || len(m.Parts) != 2 || m.Parts[0].Text != "see this" || m.HasRefs() {
		t.Fatalf("after the release delivered %+v; want the text and the file", m)
	}
	if got, _ := os.ReadFile(m.Parts[1].Path); !bytes.Equal(got, data) || m.Parts[1].Name != "report.pdf" || m.Parts[1].Type != channels.PartFile {
		t.Fatalf("file part %+v with %d bytes; want report.pdf, %d bytes", m.Parts[1], len(got), len(data))
	}
	if p := s.Posted("D30"); len(p) != 0 {
		t.Errorf("the user was told %q; the file was fine", p[0].Text)
	}
}

// The message with a file reaches the gateway with a reference that holds no secret. The
// gateway journals it (the reference beside the message) and may fetch it after a restart:
// a copy decoded from the journal's JSON is fetched by a new adapter, and again if that
// fetch was cut short.
func TestFileReferenceSurvivesTheJournal(t *testing.T) {
	s := slacktest.New(t)
	first := startWith(t, s, nil, false)
	data := randomBytes(t, 1500)
	s.Send(slacktest.UserMessage{Channel: "D40", User: user, Text: "the notes", Files: []slacktest.UserFile{{Name: "notes.txt", MIME: "text/plain", Data: data}}})
	m := first.sink.Next(t)
	if len(m.Parts) != 2 || !m.HasRefs() {
		t.Fatalf("delivered %+v; want the text and a file reference", m.Parts)
	}
	if p := m.Parts[1]; p.Path != "" || p.Name != "notes.txt" || p.MIME != "text/plain" || p.Size != int64(len(data)) || p.Type != channels.PartFile {
		t.Fatalf("file part %+v; want notes.txt as announced, not downloaded", p)
	}
	if n := len(s.Calls("files.download")); n != 0 {
		t.Fatalf("the intake downloaded the file (%d calls)", n)
	}
	for _, secret := range []string{slacktest.BotToken, slacktest.AppToken, slacktest.SigningSecret} {
		if strings.Contains(m.Parts[1].Ref, secret) {
			t.Fatalf("a secret is in the reference")
		}
	}

	// As the gateway's journal keeps it: the message's JSON, and the references beside it.
	type journaled struct {
		Message *channels.Message `json:"message"`
		Refs    []string          `json:"refs,omitempty"`
	}
	refs := make([]string, len(m.Parts))
	for i, p := range m.Parts {
		refs[i] = p.Ref
	}
	body, err := json.Marshal(journaled{Message: m, Refs: refs})
	if err != nil {
		t.Fatal(err)
	}
	decode := func() *channels.Message {
		var j journaled
		if err := json.Unmarshal(body, &j); err != nil {
			t.Fatal(err)
		}
		for i, r := range j.Refs {
			j.Message.Parts[i].Ref = r
		}
		return j.Message
	}

	// Acknowledged to Slack, so the new adapter is not sent it again.
	eventually(t, "the envelope to be acknowledged", func() bool {
		env := s.Envelopes()
		return len(env) == 1 && env[0].Acked
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.ch.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	second := startWith(t, s, nil, false)
	// A fetch cut short (the gateway stopping): the message fails, nothing is left over.
	release := s.HoldDownloads(t)
	cut, cutCancel := context.WithCancel(ctx)
	fetched := make(chan error, 1)
	go func() { fetched <- second.ch.Fetch(cut, decode()) }()
	eventually(t, "the download to start", func() bool { return len(s.Calls("files.download")) == 1 })
	cutCancel()
	if err := <-fetched; err == nil {
		t.Fatal("the fetch cut short succeeded")
	}
	release()

	again := decode()
	if err := second.ch.Fetch(ctx, again); err != nil {
		t.Fatalf("fetching the journaled message: %v", err)
	}
	if again.HasRefs() || len(again.Parts) != 2 || again.Parts[0].Text != "the notes" {
		t.Fatalf("fetched %+v; want the text and the file", again.Parts)
	}
	if got := channeltest.PartBytes(t, again.Parts[1]); !bytes.Equal(got, data) {
		t.Fatalf("fetched %d bytes; want the %d sent", len(got), len(data))
	}
	if !strings.HasPrefix(again.Parts[1].Path, second.stateDir) {
		t.Errorf("file at %s; want it under the fetching adapter's state dir", again.Parts[1].Path)
	}
	if n := len(s.Calls("files.download")); n != 2 {
		t.Errorf("%d downloads; want the cut one and the one after", n)
	}
	second.sink.ExpectNone(t, 200*time.Millisecond)
	if p := s.Posted("D40"); len(p) != 0 {
		t.Errorf("the user was told %q", p[0].Text)
	}
}

// A file over max_file_bytes is refused in plain words, as before, without a download.
// The user is told about the files refused and the rest (other files, the text) goes on,
// with a word to the agent; when nothing else is left the message is answered by the refusals.
func TestOversizedFileIsRefusedWithoutDownload(t *testing.T) {
	s := slacktest.New(t)
	st := start(t, s, func(c *Config) { c.MaxFileBytes = 1 << 20 })
	small := []byte("a small file")
	huge := slacktest.UserFile{Name: "huge.mov", MIME: "video/quicktime", Data: []byte("not really 3 MB"), Size: 3 << 20}
	refusal := "Sorry, huge.mov is too large for me (3.0 MB; I can take up to 1.0 MB), so I haven't seen it."

	s.Send(slacktest.UserMessage{Channel: "D50", User: user, Text: "watch", Files: []slacktest.UserFile{huge}})
	if m := st.sink.Next(t); m.ChatID != "D50" || m.HasRefs() || m.Text() != "watch\n[The user also sent a file (huge.mov), which is larger than the 1.0 MB this gateway accepts]" {
		t.Fatalf("delivered %q in %s; want the text and a note", m.Text(), m.ChatID)
	}
	eventually(t, "the refusal", func() bool { return len(s.Posted("D50")) == 1 })
	if got := s.Posted("D50")[0].Text; got != refusal {
		t.Fatalf("told %q; want %q", got, refusal)
	}

	s.Send(slacktest.UserMessage{Channel: "D51", User: user, Text: "two files", Files: []slacktest.UserFile{
		huge, {Name: "small.txt", MIME: "text/plain", Data: small}}})
	m := st.sink.Next(t)
	if m.ChatID != "D51" || len(m.Parts) != 3 || m.Parts[0].Text != "two files" || m.HasRefs() {
		t.Fatalf("delivered %+v; want the text, the small file and a note", m.Parts)
	}
	if got := channeltest.PartBytes(t, m.Parts[1]); !bytes.Equal(got, small) || m.Parts[1].Name != "small.txt" {
		t.Fatalf("part %+v; want small.txt", m.Parts[1])
	}
	if note := m.Parts[2].Text; note != "[1 of the 2 files of this message is larger than the 1.0 MB this gateway accepts: huge.mov]" {
		t.Errorf("note to the agent %q; want it to say huge.mov is too large", note)
	}
	eventually(t, "the refusal", func() bool { return len(s.Posted("D51")) == 1 })
	if got := s.Posted("D51")[0].Text; got != refusal {
		t.Errorf("told %q; want %q", got, refusal)
	}

	s.Send(slacktest.UserMessage{Channel: "D52", User: user, Files: []slacktest.UserFile{
		huge, {Name: "huge2.mov", MIME: "video/quicktime", Data: small, Size: 2 << 20}}})
	eventually(t, "the refusal", func() bool { return len(s.Posted("D52")) == 1 })
	want := refusal + "\nSorry, huge2.mov is too large for me (2.0 MB; I can take up to 1.0 MB), so I haven't seen it."
	if got := s.Posted("D52")[0].Text; got != want {
		t.Errorf("told %q; want %q", got, want)
	}
	st.sink.ExpectNone(t, 200*time.Millisecond)
	if n := len(s.Calls("files.download")); n != 1 {
		t.Errorf("%d downloads; want only small.txt's", n)
	}
}

// A file reference that points outside Slack (the journal or the shared intake written by
// someone else) is not fetched: the bot token never leaves for another host.
func TestFileReferenceOutsideSlackIsNotFetched(t *testing.T) {
	var hits atomic.Int64
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte("got you"))
	}))
	defer evil.Close()
	s := slacktest.New(t)
	st := startWith(t, s, nil, false)
	ref, _ := json.Marshal(map[string]any{"id": "F1", "url": evil.URL + "/file", "name": "x.txt", "size": 7, "mime": "text/plain"})
	msg := &channels.Message{Channel: Name, ChatID: "D41", ID: "1.2", Parts: []channels.Part{
		{Type: channels.PartFile, Name: "x.txt", MIME: "text/plain", Size: 7, Ref: string(ref)}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := st.ch.Fetch(ctx, msg)
	if err == nil || !strings.Contains(err.Error(), "could not download") {
		t.Fatalf("Fetch = %v; want the user told it could not be downloaded", err)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the token's request went to a host outside Slack (%d requests)", n)
	}
}

// A file whose download keeps failing is told to the user, and the words they sent with it
// still reach the agent, with a note of the missing file; the audio that never arrived
// does not make the answer a spoken one. A file sent alone is only told, as before.
func TestTextOutlivesItsFailedDownload(t *testing.T) {
	s := slacktest.New(t)
	st := start(t, s, nil)
	s.FailNext(4, fakeserver.Failure{Method: "files.download"}) // every attempt
	s.Send(slacktest.UserMessage{Channel: "D60", User: user, Text: "what is said here?",
		Files: []slacktest.UserFile{{Name: "memo.m4a", MIME: "audio/mp4", Data: randomBytes(t, 500)}}})
	m := st.sink.Next(t)
	if want := "what is said here?\n[The user also sent an audio file (memo.m4a), which could not be downloaded]"; m.ChatID != "D60" || m.HasRefs() || m.Text() != want {
		t.Fatalf("delivered %+v in %s; want the text %q", m.Parts, m.ChatID, want)
	}
	if m.IsVoice {
		t.Errorf("the message is marked as spoken, but its audio never arrived")
	}
	eventually(t, "the user told", func() bool { return len(s.Posted("D60")) == 1 })
	if got, want := s.Posted("D60")[0].Text, "Sorry, I could not download memo.m4a, so I haven't heard it. Please send it again."; got != want {
		t.Errorf("told %q; want %q", got, want)
	}

	s.FailNext(4, fakeserver.Failure{Method: "files.download"})
	s.Send(slacktest.UserMessage{Channel: "D61", User: user, Files: []slacktest.UserFile{{Name: "pic.png", MIME: "image/png", Data: randomBytes(t, 500)}}})
	eventually(t, "the user told", func() bool { return len(s.Posted("D61")) == 1 })
	if got, want := s.Posted("D61")[0].Text, "Sorry, I could not download pic.png. Please send it again."; got != want {
		t.Errorf("told %q; want %q", got, want)
	}
	st.sink.ExpectNone(t, 200*time.Millisecond)
}

// Whether a message had words travels in its journaled reference: fetched after a restart,
// a note of ours about a file that cannot be opened is not taken for the user's words.
func TestJournaledFileRefKeepsWhetherThereWasText(t *testing.T) {
	s := slacktest.New(t)
	st := startWith(t, s, func(c *Config) { c.MaxFileBytes = 1 << 20 }, false)
	huge := slacktest.UserFile{Name: "huge.mov", MIME: "video/quicktime", Data: []byte("not really 3 MB"), Size: 3 << 20}
	linked := slacktest.UserFile{Name: "plan.gdoc", MIME: "application/vnd.google-apps.document", Mode: "external"}
	s.Send(slacktest.UserMessage{Channel: "D62", User: user, Text: "see the video", Files: []slacktest.UserFile{huge}})
	s.Send(slacktest.UserMessage{Channel: "D63", User: user, Files: []slacktest.UserFile{linked, huge}})
	for range 2 {
		m := st.sink.Next(t)
		refs := make([]string, len(m.Parts))
		for i, p := range m.Parts {
			refs[i] = p.Ref
		}
		body, err := json.Marshal(struct {
			Message *channels.Message `json:"message"`
			Refs    []string          `json:"refs"`
		}{m, refs})
		if err != nil {
			t.Fatal(err)
		}
		var back struct {
			Message *channels.Message `json:"message"`
			Refs    []string          `json:"refs"`
		}
		if err := json.Unmarshal(body, &back); err != nil {
			t.Fatal(err)
		}
		for i, r := range back.Refs {
			back.Message.Parts[i].Ref = r
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = st.ch.Fetch(ctx, back.Message)
		cancel()
		switch m.ChatID {
		case "D62":
			if want := "see the video\n[The user also sent a file (huge.mov), which is larger than the 1.0 MB this gateway accepts]"; err != nil || back.Message.Text() != want {
				t.Errorf("text and a file too large: Fetch %v, text %q; want %q", err, back.Message.Text(), want)
			}
		case "D63":
			if err == nil || !strings.Contains(err.Error(), "too large") {
				t.Errorf("a file too large beside one that cannot be opened: Fetch %v, text %q; want the refusal alone", err, back.Message.Text())
			}
		}
	}
	eventually(t, "the user told", func() bool { return len(s.Posted("D62")) == 1 })
}

// What the user reads of a recording that could not be downloaded says that it was not
// heard: an audio clip recorded in Slack that failed (it has no name of the user's), an
// audio file over the limit.
func TestAudioNotDownloadedIsToldAsNotHeard(t *testing.T) {
	s := slacktest.New(t)
	st := startWith(t, s, func(c *Config) { c.MaxFileBytes = 1 << 20 }, true)
	s.FailNext(4, fakeserver.Failure{Method: "files.download"}) // every attempt
	s.AudioClip("D70", user, randomBytes(t, 500), "audio/webm")
	eventually(t, "the user told", func() bool { return len(s.Posted("D70")) == 1 })
	if got, want := s.Posted("D70")[0].Text, "Sorry, I could not download your audio clip, so I haven't heard it. Please send it again."; got != want {
		t.Errorf("told %q; want %q", got, want)
	}
	st.sink.ExpectNone(t, 200*time.Millisecond)

	s.Send(slacktest.UserMessage{Channel: "D71", User: user, Text: "what is said here?",
		Files: []slacktest.UserFile{{Name: "talk.mp3", MIME: "audio/mpeg", Data: []byte("ID3 not really 3 MB"), Size: 3 << 20}}})
	if m := st.sink.Next(t); m.Text() != "what is said here?\n[The user also sent an audio file (talk.mp3), which is larger than the 1.0 MB this gateway accepts]" {
		t.Errorf("delivered %q", m.Text())
	}
	eventually(t, "the user told", func() bool { return len(s.Posted("D71")) == 1 })
	if got, want := s.Posted("D71")[0].Text, "Sorry, talk.mp3 is too large for me (3.0 MB; I can take up to 1.0 MB), so I haven't heard it."; got != want {
		t.Errorf("told %q; want %q", got, want)
	}
}
