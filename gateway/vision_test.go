package gateway

// What the model sees (issue 13): each platform adapter against its fake platform server,
// with the real SDK clients, and the real OpenAI provider against the fake OpenAI API. A
// photo with a caption reaches the model as an image whose decoded pixels are the picture
// sent (scaled), documents as their text, an album as one request.

import (
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-telegram/bot/models"

	"gateway/channels"
	"gateway/channels/discord"
	"gateway/channels/discord/discordtest"
	"gateway/channels/slack"
	"gateway/channels/slack/slacktest"
	"gateway/channels/telegram"
	"gateway/channels/telegram/telegramtest"
	"gateway/harness"
	"gateway/harness/openaitest"
	"gateway/internal/llm"
	"gateway/internal/media"
	"gateway/internal/media/mediatest"
	"gateway/internal/secret"
	"gateway/profiles"
)

const seenAnswer = "I see a picture in four colours."

// visionEnv is a gateway whose model is the real OpenAI provider talking to a fake API.
type visionEnv struct {
	*testEnv
	oai   *openaitest.Server
	media *media.Store
}

func newVisionEnv(t *testing.T, extra []channels.Channel, opts ...envOpt) *visionEnv {
	t.Helper()
	oai := openaitest.NewServer()
	t.Cleanup(oai.Close)
	oai.SetFunc(func(openaitest.Request) openaitest.Reply {
		return openaitest.Reply{Chunks: []string{"I see a picture ", "in four colours."}}
	})
	store, err := media.OpenStore(filepath.Join(t.TempDir(), "media"), media.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]envOpt{func(c *Config, rt *Runtime, d *Deps) {
		d.Media = store
		d.NewProvider = func(harness.Config) (harness.Provider, error) {
			return harness.NewProvider(harness.Config{Provider: "openai", Model: "gpt-test", BaseURL: oai.URL(), APIKey: secret.Secret("sk-test")}, &http.Client{})
		}
	}}, opts...)
	return &visionEnv{testEnv: newEnvWith(t, t.TempDir(), extra, opts...), oai: oai, media: store}
}

// waitRequests waits for n model requests.
func (e *visionEnv) waitRequests(t *testing.T, n int) []openaitest.Request {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if reqs := e.oai.Requests(); len(reqs) >= n {
			return reqs
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the model got %d requests; want %d", len(e.oai.Requests()), n)
	return nil
}

func lastUserOf(t *testing.T, req openaitest.Request) openaitest.Message {
	t.Helper()
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			return req.Messages[i]
		}
	}
	t.Fatal("no user message in the request")
	return openaitest.Message{}
}

// assertPicture checks that the model received the caption and the 1600×1200 quadrant
// picture scaled to 1024×768 (OpenAI high detail: short side 768).
func assertPicture(t *testing.T, m openaitest.Message, caption string, images int) {
	t.Helper()
	if !strings.Contains(m.Content, caption) {
		t.Errorf("the model received %q; want the caption %q", m.Content, caption)
	}
	if len(m.Images) != images {
		t.Fatalf("the model received %d images; want %d", len(m.Images), images)
	}
	for i, im := range m.Images {
		w, h, err := mediatest.CheckQuadrants(im.Data)
		if err != nil {
			t.Fatalf("image %d: %v", i, err)
		}
		if w != 1024 || h != 768 || im.Detail != "high" {
			t.Fatalf("image %d is %d×%d (detail %q); want 1024×768, high", i, w, h, im.Detail)
		}
	}
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if ok() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %s within 30s", what)
}

func newTelegram(t *testing.T) (*telegramtest.Server, channels.Channel) {
	t.Helper()
	tg := telegramtest.NewServer(t)
	ch, err := telegram.New(telegram.Config{
		Enabled: true, Token: secret.Secret(tg.Token), APIURL: tg.URL, Mode: telegram.ModePolling,
		Access: channels.Access{AllowFrom: []string{"4242"}, DMPolicy: channels.DMAllowlist, RequireMention: true},
	}, telegram.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return tg, ch
}

var ann = &models.User{ID: 4242, FirstName: "Ann"}

func telegramAnswers(tg *telegramtest.Server) []string {
	var out []string
	for _, m := range tg.Messages(4242) {
		if m.Kind == "text" && m.Text != "" {
			out = append(out, m.Text)
		}
	}
	return out
}

func TestTelegramPhotoWithCaptionReachesTheModel(t *testing.T) {
	tg, ch := newTelegram(t)
	e := newVisionEnv(t, []channels.Channel{ch})
	tg.Send(telegramtest.Update{ChatID: 4242, From: ann, Photo: mediatest.JPEG(1600, 1200), Caption: "What is in this photo?"})
	reqs := e.waitRequests(t, 1)
	assertPicture(t, lastUserOf(t, reqs[0]), "What is in this photo?", 1)
	waitUntil(t, "answer", func() bool { a := telegramAnswers(tg); return len(a) == 1 && a[0] == seenAnswer })
	// The history references the photo under state_dir/media.
	files, _ := filepath.Glob(filepath.Join(e.media.Dir(), "*", "*"))
	if len(files) != 1 {
		t.Fatalf("kept media: %v", files)
	}
}

func TestTelegramAlbumIsOneRequestWithThreeImages(t *testing.T) {
	tg, ch := newTelegram(t)
	e := newVisionEnv(t, []channels.Channel{ch})
	pic := mediatest.JPEG(1600, 1200) // made once: Telegram sends an album's updates together
	for i := range 3 {
		u := telegramtest.Update{ChatID: 4242, From: ann, Photo: pic, MediaGroupID: "album-1"}
		if i == 1 {
			u.Caption = "Which is best?"
		}
		tg.Send(u)
	}
	reqs := e.waitRequests(t, 1)
	assertPicture(t, lastUserOf(t, reqs[0]), "Which is best?", 3)
	waitUntil(t, "answer", func() bool { return len(telegramAnswers(tg)) == 1 })
	time.Sleep(300 * time.Millisecond)
	if n := len(e.oai.Requests()); n != 1 {
		t.Fatalf("%d model requests; want one for the album", n)
	}
	if a := telegramAnswers(tg); len(a) != 1 {
		t.Fatalf("answers %q; want one", a)
	}
}

func TestTelegramDocumentsAndStickerReachTheModel(t *testing.T) {
	tg, ch := newTelegram(t)
	e := newVisionEnv(t, []channels.Channel{ch})
	tg.Send(telegramtest.Update{ChatID: 4242, From: ann, Document: []byte("milk, eggs, flour"), DocumentName: "shopping.txt", DocumentMIME: "text/plain", Caption: "Sort this"})
	reqs := e.waitRequests(t, 1)
	if got := lastUserOf(t, reqs[0]).Content; !strings.Contains(got, "[file shopping.txt]\nmilk, eggs, flour") || !strings.Contains(got, "Sort this") {
		t.Fatalf("the model received %q", got)
	}
	tg.Send(telegramtest.Update{ChatID: 4242, From: ann, Document: mediatest.PDF("The invoice total is 1234 euros"), DocumentName: "invoice.pdf", DocumentMIME: "application/pdf"})
	reqs = e.waitRequests(t, 2)
	if got := lastUserOf(t, reqs[1]).Content; !strings.Contains(got, "[file invoice.pdf]\nThe invoice total is 1234 euros") {
		t.Fatalf("the model received %q", got)
	}
	// An image sent as a document (uncompressed) is an image too.
	tg.Send(telegramtest.Update{ChatID: 4242, From: ann, Document: mediatest.PNG(1600, 1200), DocumentName: "screenshot.png", DocumentMIME: "image/png", Caption: "Read this screenshot"})
	reqs = e.waitRequests(t, 3)
	assertPicture(t, lastUserOf(t, reqs[2]), "Read this screenshot", 1)
	// A static sticker is a WebP picture the model sees.
	webp, err := os.ReadFile(filepath.Join("testdata", "sticker.webp"))
	if err != nil {
		t.Skip("no WebP sample:", err)
	}
	tg.Send(telegramtest.Update{ChatID: 4242, From: ann, Edit: func(m *models.Message) {
		id := tg.AddFile(webp, int64(len(webp)), "stickers", ".webp")
		m.Sticker = &models.Sticker{FileID: id, FileUniqueID: "u" + id, Type: "regular", Width: 512, Height: 512, Emoji: "😀", FileSize: len(webp)}
	}})
	reqs = e.waitRequests(t, 4)
	if m := lastUserOf(t, reqs[3]); len(m.Images) != 1 || !strings.Contains(m.Content, "sticker 😀") {
		t.Fatalf("sticker: %q with %d images", m.Content, len(m.Images))
	}
	waitUntil(t, "four answers", func() bool { return len(telegramAnswers(tg)) == 4 })
}

// vision: false in the profile: the model gets a description, and the user an answer.
func TestTextOnlyProfileGetsADescription(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "assistant"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "assistant", "profile.yaml"), []byte("vision: false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := profiles.Load(profiles.Config{Dir: dir, Default: "assistant"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tg, ch := newTelegram(t)
	e := newVisionEnv(t, []channels.Channel{ch}, func(c *Config, rt *Runtime, d *Deps) { rt.Profiles = set })
	tg.Send(telegramtest.Update{ChatID: 4242, From: ann, Photo: mediatest.JPEG(1600, 1200), Caption: "Nice?"})
	reqs := e.waitRequests(t, 1)
	m := lastUserOf(t, reqs[0])
	if len(m.Images) != 0 || !strings.Contains(m.Content, "(image/jpeg, 1600×1200") || !strings.Contains(m.Content, "cannot see images") || !strings.Contains(m.Content, "Nice?") {
		t.Fatalf("the model received %q with %d images", m.Content, len(m.Images))
	}
	waitUntil(t, "answer", func() bool { return len(telegramAnswers(tg)) == 1 })
}

func TestDiscordAttachmentsReachTheModel(t *testing.T) {
	srv := discordtest.New(t)
	ch, err := discord.New(discord.Config{Enabled: true, Token: secret.Secret(srv.Bot().Token), APIURL: srv.URL, Access: voiceAccess},
		discord.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e := newVisionEnv(t, []channels.Channel{ch})
	pic := mediatest.JPEG(1600, 1200)
	srv.Inject(discordtest.Incoming{ChannelID: "dm-1", AuthorID: "4242", Content: "Compare these two", Files: []discordtest.File{
		{Name: "a.jpg", ContentType: "image/jpeg", Data: pic}, {Name: "b.jpg", ContentType: "image/jpeg", Data: pic},
		{Name: "notes.txt", ContentType: "text/plain; charset=utf-8", Data: []byte("left is older")},
		{Name: "report.pdf", ContentType: "application/pdf", Data: mediatest.PDF("Sales doubled in March")}}})
	reqs := e.waitRequests(t, 1)
	m := lastUserOf(t, reqs[0])
	assertPicture(t, m, "Compare these two", 2)
	for _, want := range []string{"[file notes.txt]\nleft is older", "[file report.pdf]\nSales doubled in March"} {
		if !strings.Contains(m.Content, want) {
			t.Errorf("the model received %q; want %q", m.Content, want)
		}
	}
	waitUntil(t, "answer", func() bool {
		for _, p := range srv.Posted("dm-1") {
			if p.Content == seenAnswer {
				return true
			}
		}
		return false
	})
}

func TestSlackFilesReachTheModel(t *testing.T) {
	srv := slacktest.New(t)
	ch, err := slack.New(slack.Config{Enabled: true, BotToken: secret.Secret(slacktest.BotToken), AppToken: secret.Secret(slacktest.AppToken),
		APIURL: srv.APIURL(), Access: voiceAccess}, slack.Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e := newVisionEnv(t, []channels.Channel{ch})
	pic := mediatest.JPEG(1600, 1200)
	srv.Send(slacktest.UserMessage{Channel: "D4242", ChannelType: "im", User: "4242", Text: "What do you make of these?", Files: []slacktest.UserFile{
		{Name: "one.jpg", MIME: "image/jpeg", Data: pic}, {Name: "two.png", MIME: "image/png", Data: mediatest.PNG(1600, 1200)},
		{Name: "minutes.pdf", MIME: "application/pdf", Data: mediatest.PDF("Meeting moved to Friday")}}})
	reqs := e.waitRequests(t, 1)
	m := lastUserOf(t, reqs[0])
	assertPicture(t, m, "What do you make of these?", 2)
	if !strings.Contains(m.Content, "[file minutes.pdf]\nMeeting moved to Friday") {
		t.Errorf("the model received %q", m.Content)
	}
	waitUntil(t, "answer", func() bool {
		for _, p := range srv.Posted("D4242") {
			if strings.Contains(p.Text, "four colours") {
				return true
			}
		}
		return false
	})
}

// A picture without a caption in a group still names its sender, and reaches the model as
// a part kept under the media store; audio that was not transcribed is still described.
func TestPromptAndPartsOfAMediaMessage(t *testing.T) {
	dir := t.TempDir()
	store, err := media.OpenStore(filepath.Join(dir, "media"), media.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pic := filepath.Join(dir, "dl.jpg")
	if err := os.WriteFile(pic, mediatest.JPEG(32, 32), 0o600); err != nil {
		t.Fatal(err)
	}
	g := &Gateway{media: store, log: slog.New(slog.DiscardHandler)}
	msg := &channels.Message{ChatType: channels.ChatGroup, UserName: "Ann", Parts: []channels.Part{
		{Type: channels.PartImage, MIME: "image/jpeg", Path: pic, Name: "cat.jpg", Size: 100},
		{Type: channels.PartAudio, MIME: "audio/ogg", Path: pic},
		{Type: channels.PartFile, MIME: "application/octet-stream", Path: pic, Name: "IMG_0001"}}}
	if got := buildPrompt(msg, ""); got != "[The user sent an audio file (audio/ogg) that could not be transcribed.]\n(sent by Ann)" {
		t.Errorf("prompt %q", got)
	}
	parts := g.keepMedia(msg)
	if len(parts) != 2 || parts[0].Name != "cat.jpg" || !strings.HasPrefix(parts[0].Path, store.Dir()) || parts[0].MIME != "image/jpeg" {
		t.Fatalf("parts %+v", parts)
	}
	if parts[1].Type != llm.PartImage || parts[1].MIME != "image/jpeg" {
		t.Errorf("a JPEG sent as application/octet-stream is %+v; want an image", parts[1])
	}
}

// Media pruned from state_dir/media (here: a total of 1 byte allowed) leave the history
// whole: the next request names the photo as no longer available, and the chat goes on.
func TestPrunedPhotoIsNamedAsGone(t *testing.T) {
	tg, ch := newTelegram(t)
	e := newVisionEnv(t, []channels.Channel{ch})
	tg.Send(telegramtest.Update{ChatID: 4242, From: ann, Photo: mediatest.JPEG(64, 48), Caption: "Remember this"})
	e.waitRequests(t, 1)
	waitUntil(t, "answer", func() bool { return len(telegramAnswers(tg)) == 1 })
	tight, err := media.OpenStore(e.media.Dir(), media.StoreConfig{MaxBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n, _, err := tight.Prune(); err != nil || n != 1 {
		t.Fatalf("pruned %d files (%v); want the photo", n, err)
	}
	tg.Send(telegramtest.Update{ChatID: 4242, From: ann, Text: "What did I send?"})
	reqs := e.waitRequests(t, 2)
	var first openaitest.Message
	for _, m := range reqs[1].Messages {
		if m.Role == "user" {
			first = m
			break
		}
	}
	if len(first.Images) != 0 || !strings.Contains(first.Content, "no longer available") || !strings.Contains(first.Content, "Remember this") {
		t.Fatalf("the earlier message reached the model as %q with %d images", first.Content, len(first.Images))
	}
	waitUntil(t, "second answer", func() bool { return len(telegramAnswers(tg)) == 2 })
}
