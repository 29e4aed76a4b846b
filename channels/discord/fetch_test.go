package discord_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/discord"
	"gateway/channels/discord/discordtest"
	"gateway/internal/fakeserver"
	"gateway/internal/secret"
)

// A download that hangs in one chat must not keep another chat's message from the gateway:
// attachments are fetched on the chat's own session, not by the adapter's intake.
func TestSlowDownloadHoldsUpNoOtherChat(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	release := srv.HoldDownloads(t, "760")
	picture := []byte("\x89PNG a slow picture")
	srv.Inject(discordtest.Incoming{ChannelID: "760", AuthorID: user, Content: "look at this",
		Files: []discordtest.File{{Name: "slow.png", ContentType: "image/png", Data: picture}}})
	waitFor(t, "the download to start", func() bool { return srv.HeldDownloads() == 1 })

	srv.InjectDM("761", user, "meanwhile, in another chat")
	m := e.sink.Next(t)
	if m.ChatID != "761" || m.Text() != "meanwhile, in another chat" {
		t.Fatalf("delivered %+v while the other chat's download hangs; want the other chat's message", m)
	}
	if srv.HeldDownloads() != 1 {
		t.Fatalf("the first download is no longer held")
	}

	release()
	m = e.sink.Next(t)
	if m.ChatID != "760" || len(m.Parts) != 2 || m.Text() != "look at this" {
		t.Fatalf("after the download: %+v", m)
	}
	if b, err := os.ReadFile(m.Parts[1].Path); err != nil || !bytes.Equal(b, picture) {
		t.Errorf("the picture saved differs (%v)", err)
	}
}

// journaled is how the gateway's intake journal keeps a message: the parts' references
// beside the message, since Part.Ref is not on the JSON wire.
type journaled struct {
	Message *channels.Message `json:"message"`
	Refs    []string          `json:"refs,omitempty"`
}

func roundTrip(t *testing.T, m *channels.Message) *channels.Message {
	t.Helper()
	j := journaled{Message: m, Refs: make([]string, len(m.Parts))}
	for i, p := range m.Parts {
		j.Refs[i] = p.Ref
	}
	body, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	var back journaled
	if err := json.Unmarshal(body, &back); err != nil {
		t.Fatal(err)
	}
	for i, ref := range back.Refs {
		back.Message.Parts[i].Ref = ref
	}
	return back.Message
}

// startBare starts an adapter whose sink does not fetch: what it delivers keeps its references.
func startBare(t *testing.T, srv *discordtest.Server, cfg discord.Config) (*discord.Channel, *channeltest.Sink, string) {
	t.Helper()
	cfg.Token, cfg.APIURL = secret.Secret(srv.Bot().Token), srv.URL
	state := t.TempDir()
	ch, err := discord.New(cfg, discord.Options{StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	sink := channeltest.NewSink()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ch.Start(ctx, sink); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ch.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return ch, sink, state
}

// The message is delivered with references, not downloads; a copy read back from the
// journal is fetched by another process, and again after a restart.
func TestAttachmentReferenceSurvivesTheJournal(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	cfg := discord.Config{Access: defaultAccess()}
	_, sink, _ := startBare(t, srv, cfg)
	voice := append([]byte("OggS"), bytes.Repeat([]byte{3}, 2000)...)
	srv.InjectVoice("770", user, voice, 1.5, false)
	m := sink.Next(t)
	if !m.IsVoice || len(m.Parts) != 1 || m.Parts[0].Ref == "" || m.Parts[0].Path != "" {
		t.Fatalf("delivered %+v; want one voice part by reference", m)
	}
	if ref := m.Parts[0].Ref; strings.Contains(ref, srv.Bot().Token) || !json.Valid([]byte(ref)) {
		t.Errorf("reference %q: want plain JSON without the token", ref)
	}
	for _, c := range srv.Calls() {
		if strings.HasPrefix(c.Path, "/attachments/") {
			t.Fatalf("downloaded before delivery: %s", c.Path)
		}
	}

	// Another process (the one answering the chat) fetches the journaled copy.
	other, _, otherState := startBare(t, srv, cfg)
	for round := range 2 { // the second time as after a restart: fetched again from the journal
		cp := roundTrip(t, m)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := other.Fetch(ctx, cp)
		cancel()
		if err != nil {
			t.Fatalf("round %d: Fetch: %v", round, err)
		}
		p := cp.Parts[0]
		if p.Ref != "" || !strings.HasPrefix(p.Path, otherState) || p.Type != channels.PartAudio || !p.Voice ||
			p.MIME != "audio/ogg" || p.Duration != 1.5 || p.Size != int64(len(voice)) || !cp.IsVoice {
			t.Fatalf("round %d: fetched part %+v", round, p)
		}
		if b, err := os.ReadFile(p.Path); err != nil || !bytes.Equal(b, voice) {
			t.Fatalf("round %d: saved voice differs (%v)", round, err)
		}
	}
}

// An attachment over max_file_bytes is refused in plain words without a download; the
// other attachments of the message go on, and the agent is told one is missing.
func TestOversizedAttachmentRefusedWithoutDownload(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess(), MaxFileBytes: 1_000_000})
	small := []byte("small notes")
	id := srv.Inject(discordtest.Incoming{ChannelID: "780", AuthorID: user, Content: "two files", Files: []discordtest.File{
		{Name: "huge.bin", ContentType: "application/octet-stream", Data: bytes.Repeat([]byte{9}, 1_500_000)},
		{Name: "notes.txt", ContentType: "text/plain", Data: small},
	}})
	m := e.sink.Next(t)
	if len(m.Parts) != 3 || m.Parts[1].Name != "notes.txt" || m.Parts[1].Path == "" {
		t.Fatalf("delivered %+v; want the text, the small file and a note", m.Parts)
	}
	if b, err := os.ReadFile(m.Parts[1].Path); err != nil || !bytes.Equal(b, small) {
		t.Errorf("the small file saved differs (%v)", err)
	}
	if want := "[1 of the 2 attachments of this message is larger than the 1 MB this gateway accepts]"; m.Parts[2].Text != want {
		t.Errorf("note %q; want %q", m.Parts[2].Text, want)
	}
	waitFor(t, "the refusal", func() bool { return len(srv.Posted("780")) == 1 })
	if got, want := srv.Posted("780")[0].Content, "Sorry, that file is too large for me (1.5 MB; I can take up to 1 MB), so I haven't seen it."; got != want {
		t.Errorf("told %q; want %q", got, want)
	}
	for _, c := range srv.Calls() {
		if strings.HasPrefix(c.Path, "/attachments/780/"+id+"/0/") {
			t.Errorf("the oversized file was downloaded: %s", c.Path)
		}
	}
}

// Discord's signed attachment URLs expire: a message fetched late (after a restart) is read
// again for a fresh URL rather than lost.
func TestExpiredAttachmentURLIsRenewed(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	ch, sink, _ := startBare(t, srv, discord.Config{Access: defaultAccess()})
	doc := []byte("%PDF a report")
	id := srv.Inject(discordtest.Incoming{ChannelID: "790", AuthorID: user, Content: "read this",
		Files: []discordtest.File{{Name: "report.pdf", ContentType: "application/pdf", Data: doc}}})
	m := roundTrip(t, sink.Next(t))
	srv.ExpireAttachmentURLs()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ch.Fetch(ctx, m); err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if b, err := os.ReadFile(m.Parts[1].Path); err != nil || !bytes.Equal(b, doc) {
		t.Fatalf("saved file differs (%v); parts %+v", err, m.Parts)
	}
	var downloads, reads int
	for _, c := range srv.Calls() {
		switch {
		case strings.HasPrefix(c.Path, "/attachments/790/"+id+"/"):
			downloads++
		case strings.HasSuffix(c.Path, "/channels/790/messages/"+id) && c.Method == "GET":
			reads++
		}
	}
	if downloads != 2 || reads != 1 {
		t.Errorf("%d downloads and %d reads of the message; want the expired URL tried, the message read again, the fresh URL used", downloads, reads)
	}
}

// A download that fails is told to the user in plain words, and what the user wrote with
// it still reaches the agent, with a word about the missing file; in a message with several
// attachments the others go on. Neither the told words nor the logs carry the file's URL.
func TestFailedDownloadIsToldInPlainWords(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	const told = "Sorry, I could not download your attachment. Please send it again."

	srv.FailNext(1, fakeserver.Failure{Method: "getAttachment", Chat: "800", Status: 500})
	srv.Inject(discordtest.Incoming{ChannelID: "800", AuthorID: user, Content: "what does this say?",
		Files: []discordtest.File{{Name: "a.txt", ContentType: "text/plain", Data: []byte("a")}}})
	m := e.sink.Next(t)
	if want := "what does this say?\n[The user also sent a file (a.txt), which could not be downloaded]"; m.Text() != want || m.HasRefs() {
		t.Fatalf("delivered %+v; want the text %q and no reference", m.Parts, want)
	}
	waitFor(t, "the user told", func() bool { return len(srv.Posted("800")) == 1 })
	if got := srv.Posted("800")[0].Content; got != told {
		t.Errorf("told %q; want %q", got, told)
	}

	srv.FailNext(1, fakeserver.Failure{Method: "getAttachment", Chat: "800", Status: 404})
	srv.Inject(discordtest.Incoming{ChannelID: "800", AuthorID: user, Content: "two files", Files: []discordtest.File{
		{Name: "gone.txt", ContentType: "text/plain", Data: []byte("gone")},
		{Name: "here.txt", ContentType: "text/plain", Data: []byte("here")},
	}})
	m = e.sink.Next(t)
	if len(m.Parts) != 3 || m.Parts[1].Name != "here.txt" || m.Parts[2].Text != "[1 of the 2 attachments of this message could not be downloaded]" {
		t.Fatalf("delivered %+v; want the text, the file that came and a note", m.Parts)
	}
	waitFor(t, "the user told", func() bool { return len(srv.Posted("800")) == 2 })
	if got := srv.Posted("800")[1].Content; got != told {
		t.Errorf("told %q; want %q", got, told)
	}

	// A file alone: the user is told, and the agent has nothing to answer.
	srv.FailNext(1, fakeserver.Failure{Method: "getAttachment", Chat: "801", Status: 500})
	srv.Inject(discordtest.Incoming{ChannelID: "801", AuthorID: user,
		Files: []discordtest.File{{Name: "b.png", ContentType: "image/png", Data: []byte("\x89PNG b")}}})
	waitFor(t, "the user told", func() bool { return len(srv.Posted("801")) == 1 })
	if got := srv.Posted("801")[0].Content; got != told {
		t.Errorf("told %q; want %q", got, told)
	}
	e.sink.ExpectNone(t, 200*time.Millisecond)
	if l := e.logs.String(); strings.Contains(l, "/attachments/") {
		t.Errorf("an attachment URL is in the logs:\n%s", l)
	}
}

// Whether a message had text travels in its journaled reference: fetched after a restart,
// when the text part could be the adapter's own words, a failed file still lets the text
// through; an image over the limit is told and named to the agent the same way.
func TestTextOutlivesItsFailedAttachmentAfterARestart(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	cfg := discord.Config{Access: defaultAccess(), MaxFileBytes: 1_000_000}
	_, sink, _ := startBare(t, srv, cfg)
	srv.Inject(discordtest.Incoming{ChannelID: "810", AuthorID: user, Content: "is this too big?",
		Files: []discordtest.File{{Name: "huge.png", ContentType: "image/png", Data: bytes.Repeat([]byte{7}, 1_500_000)}}})
	m := roundTrip(t, sink.Next(t))

	other, _, _ := startBare(t, srv, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := other.Fetch(ctx, m); err != nil {
		t.Fatalf("Fetch: %v; want the text to go on", err)
	}
	if want := "is this too big?\n[The user also sent an image (huge.png), which is larger than the 1 MB this gateway accepts]"; m.Text() != want || m.HasRefs() {
		t.Fatalf("fetched %+v; want the text %q and no reference", m.Parts, want)
	}
	waitFor(t, "the user told", func() bool { return len(srv.Posted("810")) == 1 })
	if got, want := srv.Posted("810")[0].Content, "Sorry, that file is too large for me (1.5 MB; I can take up to 1 MB), so I haven't seen it."; got != want {
		t.Errorf("told %q; want %q", got, want)
	}
}

// What the user reads of a recording that could not be downloaded says that it was not
// heard: a voice message that failed, an audio file over the limit.
func TestAudioNotDownloadedIsToldAsNotHeard(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess(), MaxFileBytes: 1_000_000})

	srv.FailNext(1, fakeserver.Failure{Method: "getAttachment", Chat: "820", Status: 500})
	srv.InjectVoice("820", user, []byte("OggS voice"), 2, false)
	waitFor(t, "the user told", func() bool { return len(srv.Posted("820")) == 1 })
	if got, want := srv.Posted("820")[0].Content, "Sorry, I could not download your voice message, so I haven't heard it. Please send it again."; got != want {
		t.Errorf("told %q; want %q", got, want)
	}
	e.sink.ExpectNone(t, 200*time.Millisecond)

	srv.Inject(discordtest.Incoming{ChannelID: "821", AuthorID: user, Content: "what is said here?",
		Files: []discordtest.File{{Name: "memo.mp3", ContentType: "audio/mpeg", Data: bytes.Repeat([]byte{7}, 1_500_000)}}})
	m := e.sink.Next(t)
	if want := "what is said here?\n[The user also sent an audio file (memo.mp3), which is larger than the 1 MB this gateway accepts]"; m.Text() != want {
		t.Errorf("delivered %q; want %q", m.Text(), want)
	}
	waitFor(t, "the user told", func() bool { return len(srv.Posted("821")) == 1 })
	if got, want := srv.Posted("821")[0].Content, "Sorry, that audio file is too large for me (1.5 MB; I can take up to 1 MB), so I haven't heard it."; got != want {
		t.Errorf("told %q; want %q", got, want)
	}
}
