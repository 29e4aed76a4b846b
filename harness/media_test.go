package harness_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gateway/harness"
	"gateway/harness/anthropictest"
	"gateway/harness/openaitest"
	"gateway/internal/llm"
	"gateway/internal/media/mediatest"
	"gateway/internal/secret"
)

func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A photo with a caption reaches the OpenAI API as an image_url data URL in high detail,
// scaled to fit 2048 and then 768 on its short side, its pixels intact, with the caption.
func TestOpenAIReceivesTheImageScaled(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.Push(openaitest.Reply{Text: "A picture in four colours."})
	dir := t.TempDir()
	photo := writeFile(t, dir, "photo.jpg", mediatest.JPEG(1600, 800))
	sdir := t.TempDir()
	store, err := harness.OpenStore(sdir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	s := openSession(t, harness.SessionOptions{Store: store, Provider: openAI(t, srv)})
	res, err := s.RunWith(context.Background(), "What is in this picture?",
		[]llm.Part{{Type: llm.PartImage, MIME: "image/jpeg", Path: photo, Name: "photo.jpg"}}, nil)
	if err != nil || res.Text != "A picture in four colours." {
		t.Fatalf("run: %q %v", res.Text, err)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	user := reqs[0].Messages[len(reqs[0].Messages)-1]
	if user.Role != "user" || user.Content != "What is in this picture?" || len(user.Images) != 1 {
		t.Fatalf("user message %q with %d images", user.Content, len(user.Images))
	}
	im := user.Images[0]
	if im.Detail != "high" || im.MIME != "image/jpeg" {
		t.Fatalf("image %s detail %q", im.MIME, im.Detail)
	}
	w, h, err := mediatest.CheckQuadrants(im.Data)
	if err != nil {
		t.Fatal(err)
	}
	if w != 1536 || h != 768 {
		t.Fatalf("the model received %d×%d; want 1536×768 (short side 768)", w, h)
	}
	// The history keeps the path, not the bytes.
	files, _ := filepath.Glob(filepath.Join(sdir, "*.jsonl"))
	if len(files) != 1 {
		t.Fatalf("history files: %v", files)
	}
	body, _ := os.ReadFile(files[0])
	if !strings.Contains(string(body), `"parts":[{"type":"image","mime":"image/jpeg","path":`+strconv.Quote(photo)) || len(body) > 4096 {
		t.Errorf("history should reference the photo by path:\n%s", body)
	}
}

// The Anthropic API receives image blocks (base64), long side ≤ 1568 and at most 1.15 MP,
// before the text.
func TestAnthropicReceivesImageBlocks(t *testing.T) {
	srv := anthropictest.NewServer()
	t.Cleanup(srv.Close)
	srv.Push(anthropictest.Reply{Text: "Two pictures."})
	p, err := harness.NewProvider(harness.Config{Provider: "anthropic", Model: "claude-test", BaseURL: srv.URL(), APIKey: secret.Secret(testKey)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a := writeFile(t, dir, "a.jpg", mediatest.JPEG(1600, 800))
	b := writeFile(t, dir, "b.png", mediatest.PNG(400, 300))
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: p})
	if _, err := s.RunWith(context.Background(), "Compare them.", []llm.Part{
		{Type: llm.PartImage, MIME: "image/jpeg", Path: a}, {Type: llm.PartImage, MIME: "image/png", Path: b}}, nil); err != nil {
		t.Fatal(err)
	}
	msgs := srv.Requests()[0].Messages
	blocks := msgs[len(msgs)-1].Blocks
	if len(blocks) != 3 || blocks[0].Type != "image" || blocks[1].Type != "image" || blocks[2].Type != "text" || blocks[2].Text != "Compare them." {
		t.Fatalf("blocks: %+v", blocks)
	}
	w, h, err := mediatest.CheckQuadrants(blocks[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	if max(w, h) > 1568 || w*h > 1_150_000 || w < 1400 {
		t.Fatalf("first image %d×%d; want long side ≤ 1568 and ≤ 1.15 MP", w, h)
	}
	if w, h, err := mediatest.CheckQuadrants(blocks[1].Data); err != nil || w != 400 || h != 300 || blocks[1].MIME != "image/png" {
		t.Fatalf("small PNG: %d×%d %s %v", w, h, blocks[1].MIME, err)
	}
}

// A text file and a real PDF reach the model as their text with their names.
func TestDocumentsReachTheModelAsText(t *testing.T) {
	srv := newOpenAIServer(t)
	dir := t.TempDir()
	txt := writeFile(t, dir, "notes.txt", []byte("buy milk and eggs"))
	pdf := writeFile(t, dir, "report.pdf", mediatest.PDF("Quarterly revenue grew 42 percent"))
	bin := writeFile(t, dir, "blob.bin", []byte{0, 1, 2, 3})
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: openAI(t, srv)})
	if _, err := s.RunWith(context.Background(), "Summarise.", []llm.Part{
		{Type: llm.PartFile, MIME: "text/plain", Path: txt, Name: "notes.txt"},
		{Type: llm.PartFile, MIME: "application/pdf", Path: pdf, Name: "report.pdf"},
		{Type: llm.PartFile, MIME: "application/octet-stream", Path: bin, Name: "blob.bin"}}, nil); err != nil {
		t.Fatal(err)
	}
	msgs := srv.Requests()[0].Messages
	got := msgs[len(msgs)-1].Content
	for _, want := range []string{"[file notes.txt]\nbuy milk and eggs\n[end of file notes.txt]", "[file report.pdf]\nQuarterly revenue grew 42 percent",
		"[file blob.bin (application/octet-stream, 4 bytes): not a text document or PDF", "Summarise."} {
		if !strings.Contains(got, want) {
			t.Errorf("request lacks %q:\n%s", want, got)
		}
	}
}

// A long text file sent to a model with a small window (8192 tokens, as the server counts
// too) is read in part and answered at the first request, the model told that the rest is
// cut; the same file to a model with a large window is sent far further. Before, the whole
// 76 KB went to the small model, which refused it as a conversation too long: the user was
// told to send /new, which could not help.
func TestLongDocumentIsCutToTheModelsWindow(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.LimitContext(8192)
	report := writeFile(t, t.TempDir(), "report.txt", []byte(strings.Repeat("line of the report\n", 4000)))
	part := []llm.Part{{Type: llm.PartFile, MIME: "text/plain", Path: report, Name: "report.txt"}}
	small := openSession(t, harness.SessionOptions{Key: "web:small", Store: openStore(t), Provider: openAI(t, srv), Model: "llama3", ContextWindow: 8192})
	srv.Push(openaitest.Reply{Text: "It is a report."})
	res, err := small.RunWith(context.Background(), "What does it say?", part, nil)
	if err != nil || res.Text != "It is a report." {
		t.Fatalf("%q %v", res.Text, err)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests; want the file answered at the first", len(reqs))
	}
	got := reqs[0].Messages[len(reqs[0].Messages)-1].Content
	if !strings.HasPrefix(got, "[file report.txt]\nline of the report\n") || !strings.Contains(got, "[… the rest of report.txt is cut") ||
		!strings.HasSuffix(got, "What does it say?") {
		t.Fatalf("request %q … %q", got[:min(len(got), 60)], got[max(len(got)-200, 0):])
	}

	srv.LimitContext(0)
	large := openSession(t, harness.SessionOptions{Key: "web:large", Store: openStore(t), Provider: openAI(t, srv), Model: "gpt-4o"})
	if _, err := large.RunWith(context.Background(), "What does it say?", part, nil); err != nil {
		t.Fatal(err)
	}
	reqs = srv.Requests()
	if n := len(reqs[1].Messages[len(reqs[1].Messages)-1].Content); n < 70_000 || n <= 2*len(got) {
		t.Fatalf("a model of 128k tokens got %d bytes of the file (the small one %d)", n, len(got))
	}
}

// A profile whose model cannot see gets a description instead, and an answer.
func TestTextOnlyModelGetsADescription(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.Push(openaitest.Reply{Text: "I cannot see it, but thanks."})
	photo := writeFile(t, t.TempDir(), "photo.jpg", mediatest.JPEG(640, 480))
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: openAI(t, srv), TextOnly: true})
	res, err := s.RunWith(context.Background(), "Look!", []llm.Part{{Type: llm.PartImage, MIME: "image/jpeg", Path: photo, Name: "photo.jpg"}}, nil)
	if err != nil || res.Text == "" {
		t.Fatal(res, err)
	}
	msgs := srv.Requests()[0].Messages
	u := msgs[len(msgs)-1]
	if len(u.Images) != 0 || !strings.Contains(u.Content, "[image photo.jpg (image/jpeg, 640×480") || !strings.Contains(u.Content, "cannot see images") || !strings.HasSuffix(u.Content, "Look!") {
		t.Fatalf("content %q, %d images", u.Content, len(u.Images))
	}
}

// A provider that refuses images for the model: the request is sent again once without
// them, the model is told what was left out, and the user gets an answer. Later requests
// of the session leave the images out from the start.
func TestRefusedImagesAreRetriedWithout(t *testing.T) {
	srv := newOpenAIServer(t)
	srv.Push(openaitest.Reply{Status: 400, Message: "Invalid content type. image_url is only supported by certain models."},
		openaitest.Reply{Text: "I could not see the picture."}, openaitest.Reply{Text: "Still no."})
	photo := writeFile(t, t.TempDir(), "photo.jpg", mediatest.JPEG(64, 64))
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: openAI(t, srv), MaxRetries: -1})
	res, err := s.RunWith(context.Background(), "What is this?", []llm.Part{{Type: llm.PartImage, MIME: "image/jpeg", Path: photo, Name: "photo.jpg"}}, nil)
	if err != nil || res.Text != "I could not see the picture." {
		t.Fatalf("%q %v", res.Text, err)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d attempts; want 2", len(reqs))
	}
	first, second := reqs[0].Messages[len(reqs[0].Messages)-1], reqs[1].Messages[len(reqs[1].Messages)-1]
	if len(first.Images) != 1 || len(second.Images) != 0 || !strings.Contains(second.Content, "[image photo.jpg (image/jpeg, 64×64") ||
		!strings.Contains(second.Content, "the model refused images") {
		t.Fatalf("first %d images; second %d images, %q", len(first.Images), len(second.Images), second.Content)
	}
	if _, err := s.Run(context.Background(), "And now?", nil); err != nil {
		t.Fatal(err)
	}
	if reqs = srv.Requests(); len(reqs) != 3 {
		t.Fatalf("%d requests after the second run; want 3 (no second refusal)", len(reqs))
	}
	for _, m := range reqs[2].Messages {
		if len(m.Images) != 0 {
			t.Fatal("a later request carried the refused image")
		}
	}
}

// A full album (ten photos, the most one message carries on Telegram, Discord, Slack or the
// web chat) reaches the model whole. Past the bound of one request, the model is told truly
// that the rest of the new message was left out, never that it saw them earlier.
func TestEveryPhotoOfAnAlbumReachesTheModel(t *testing.T) {
	srv := newOpenAIServer(t)
	dir := t.TempDir()
	album := func(n int) []llm.Part {
		var parts []llm.Part
		for i := range n {
			name := fmt.Sprintf("p%d.png", i)
			parts = append(parts, llm.Part{Type: llm.PartImage, MIME: "image/png", Path: writeFile(t, dir, name, mediatest.PNG(40+i, 30)), Name: name})
		}
		return parts
	}
	s := openSession(t, harness.SessionOptions{Store: openStore(t), Provider: openAI(t, srv)})
	if _, err := s.RunWith(context.Background(), "Ten photos.", album(10), nil); err != nil {
		t.Fatal(err)
	}
	reqs := srv.Requests()
	u := reqs[0].Messages[len(reqs[0].Messages)-1]
	if len(u.Images) != 10 || u.Content != "Ten photos." {
		t.Fatalf("the model got %d of 10 images, with %q", len(u.Images), u.Content)
	}

	s = openSession(t, harness.SessionOptions{Store: openStore(t), Provider: openAI(t, srv)})
	if _, err := s.RunWith(context.Background(), "Twelve photos.", album(12), nil); err != nil {
		t.Fatal(err)
	}
	reqs = srv.Requests()
	u = reqs[1].Messages[len(reqs[1].Messages)-1]
	if len(u.Images) != 10 || strings.Contains(u.Content, "sent earlier") || strings.Count(u.Content, "not shown") != 2 ||
		!strings.Contains(u.Content, "[image p11.png not shown") {
		t.Fatalf("twelve photos: the model got %d images, with %q", len(u.Images), u.Content)
	}
}

// A history entry whose media were pruned still loads; the model is told the file is gone.
func TestPrunedMediaStillLoad(t *testing.T) {
	srv := newOpenAIServer(t)
	store := openStore(t)
	dir := t.TempDir()
	photo := writeFile(t, dir, "photo.jpg", mediatest.JPEG(64, 64))
	doc := writeFile(t, dir, "notes.txt", []byte("hello"))
	s := openSession(t, harness.SessionOptions{Key: "test:pruned", Store: store, Provider: openAI(t, srv)})
	if _, err := s.RunWith(context.Background(), "Keep these.", []llm.Part{{Type: llm.PartImage, MIME: "image/jpeg", Path: photo, Name: "photo.jpg"},
		{Type: llm.PartFile, MIME: "text/plain", Path: doc, Name: "notes.txt"}}, nil); err != nil {
		t.Fatal(err)
	}
	os.Remove(photo)
	os.Remove(doc)
	s2 := openSession(t, harness.SessionOptions{Key: "test:pruned", Store: store, Provider: openAI(t, srv)})
	if _, err := s2.Run(context.Background(), "What did I send?", nil); err != nil {
		t.Fatal(err)
	}
	reqs := srv.Requests()
	var first openaitest.Message
	for _, m := range reqs[1].Messages {
		if m.Role == "user" {
			first = m
			break
		}
	}
	if len(first.Images) != 0 || !strings.Contains(first.Content, "[image photo.jpg: no longer available") ||
		!strings.Contains(first.Content, "[file notes.txt: no longer available") || !strings.HasSuffix(first.Content, "Keep these.") {
		t.Fatalf("reloaded message: %q", first.Content)
	}
}

// BenchmarkPhotoMessage measures one photo message (a grainy 4032×3024 camera JPEG, or
// Telegram's 1280×960 photo size, with a caption) from the harness to the fake API over HTTP with the real SDK: reading,
// scaling and encoding the picture, and the request. Each iteration is a fresh session, so
// nothing is cached. It reports the request body size and the picture sent.
func BenchmarkPhotoMessage(b *testing.B) {
	dir := b.TempDir()
	sizes := map[string]string{
		"phone-12MP": writeFile(b, dir, "phone.jpg", mediatest.Photo(4032, 3024)),   // a camera photo sent as a file (Discord, Slack, web)
		"telegram":   writeFile(b, dir, "telegram.jpg", mediatest.Photo(1280, 960)), // Telegram's largest photo size
	}
	for _, name := range []string{"phone-12MP/openai", "phone-12MP/anthropic", "telegram/openai", "telegram/anthropic"} {
		size, provider, _ := strings.Cut(name, "/")
		photo := sizes[size]
		b.Run(name, func(b *testing.B) {
			var (
				prov  harness.Provider
				last  func() (int, []byte)
				close func()
				err   error
			)
			if provider == "openai" {
				srv := openaitest.NewServer()
				close = srv.Close
				prov, err = harness.NewProvider(harness.Config{Provider: "openai", Model: "gpt-test", BaseURL: srv.URL(), APIKey: secret.Secret(testKey)}, nil)
				last = func() (int, []byte) {
					r := srv.Requests()
					m := r[len(r)-1].Messages
					return len(r[len(r)-1].Body), m[len(m)-1].Images[0].Data
				}
			} else {
				srv := anthropictest.NewServer()
				close = srv.Close
				prov, err = harness.NewProvider(harness.Config{Provider: "anthropic", Model: "claude-test", BaseURL: srv.URL(), APIKey: secret.Secret(testKey)}, nil)
				last = func() (int, []byte) {
					r := srv.Requests()
					m := r[len(r)-1].Messages
					return len(r[len(r)-1].Body), m[len(m)-1].Blocks[0].Data
				}
			}
			if err != nil {
				b.Fatal(err)
			}
			defer close()
			parts := []llm.Part{{Type: llm.PartImage, MIME: "image/jpeg", Path: photo, Name: "photo.jpg"}}
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				s, err := harness.OpenSession(harness.SessionOptions{Key: "bench:photo", Provider: prov})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.RunWith(context.Background(), "What is in this photo?", parts, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
			size, img := last()
			w, h, err := mediatest.CheckQuadrants(img)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(size), "request-bytes")
			b.ReportMetric(float64(len(img)), "image-bytes")
			b.ReportMetric(float64(w*h), "image-pixels")
		})
	}
}

// cpuTime is the CPU time (user and system) the process has used, fake servers included.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A file that cannot be read is described to the model, an outside provider, in plain
// words: without its path under state_dir (which names the chat and the state directory).
// The admin's log has the whole error.
func TestUnreadableMediaAreDescribedWithoutTheirPath(t *testing.T) {
	srv := newOpenAIServer(t)
	dir := filepath.Join(t.TempDir(), "private-state-dir")
	photo, doc := filepath.Join(dir, "photo.jpg"), filepath.Join(dir, "notes.txt")
	for _, p := range []string{photo, doc} { // a folder where the file should be: reading it fails
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	s := openSession(t, harness.SessionOptions{Key: "test:unreadable", Store: openStore(t), Provider: openAI(t, srv), Logger: log})
	if _, err := s.RunWith(context.Background(), "Look.", []llm.Part{{Type: llm.PartImage, MIME: "image/jpeg", Path: photo, Name: "photo.jpg"},
		{Type: llm.PartFile, MIME: "text/plain", Path: doc, Name: "notes.txt"}}, nil); err != nil {
		t.Fatal(err)
	}
	var user string
	for _, m := range srv.Requests()[0].Messages {
		if m.Role == "user" {
			user = m.Content
		}
	}
	if strings.Contains(user, "private-state-dir") || !strings.Contains(user, "[image photo.jpg: could not be read") ||
		!strings.Contains(user, "[file notes.txt: could not be read") {
		t.Fatalf("the model was told %q; want both files said unreadable, without their path", user)
	}
	if !strings.Contains(logs.String(), "private-state-dir") {
		t.Fatalf("the log does not have the whole error:\n%s", logs.String())
	}
}

// mediaChat is a chat with a model of a 6000-token window (the server counts images as
// OpenAI does): four exchanges of text of words words each, then prompt with its parts.
// It returns the answer, the compactions (reason/outcome) and the requests of the turn.
func mediaChat(t *testing.T, words int, prompt string, parts []llm.Part) (string, []string, []openaitest.Request) {
	t.Helper()
	const window = 6000
	srv := newOpenAIServer(t)
	srv.LimitContext(window)
	summariser(srv)
	var mu sync.Mutex
	var compactions []string
	s := openSession(t, harness.SessionOptions{Key: "web:album", Store: openStore(t), Provider: openAI(t, srv), Model: "gpt-test",
		ContextWindow: window, OnCompact: func(reason, outcome string) {
			mu.Lock()
			compactions = append(compactions, reason+"/"+outcome)
			mu.Unlock()
		}})
	for i := range 4 {
		if _, err := s.Run(context.Background(), fmt.Sprintf("note %d %s", i, strings.Repeat("words ", words)), nil); err != nil {
			t.Fatal(err)
		}
	}
	before := len(srv.Requests())
	t.Logf("the chat holds %d tokens", openaitest.Tokens(srv.Requests()[before-1].Body))
	res, err := s.RunWith(context.Background(), prompt, parts, nil)
	if err != nil {
		t.Fatalf("the message with media: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return res.Text, compactions, srv.Requests()[before:]
}

// An album of photos that, with the conversation before it, passes the model's window is
// made room for before it is sent (a compaction at the threshold), not after the provider
// refused the request. Before, images counted for nothing in the estimate: the chat looked
// half full, the request was refused, and only the overflow retry saved it.
func TestPhotosAreCountedBeforeTheRequest(t *testing.T) {
	dir := t.TempDir()
	var album []llm.Part
	for i := range 5 {
		p := writeFile(t, dir, fmt.Sprintf("photo%d.jpg", i), mediatest.JPEG(1024, 768)) // 765 tokens each at OpenAI
		album = append(album, llm.Part{Type: llm.PartImage, MIME: "image/jpeg", Path: p, Name: filepath.Base(p)})
	}
	answer, compactions, reqs := mediaChat(t, 400, "What do these show?", album)
	if !strings.HasPrefix(answer, "answer to What do thes") {
		t.Fatalf("answer %q", answer)
	}
	madeRoomAhead(t, reqs, compactions)
	last := reqs[len(reqs)-1].Messages
	if got := len(last[len(last)-1].Images); got != 5 {
		t.Fatalf("the model got %d of the 5 photos", got)
	}
}

// A long text document is counted by its length: with the conversation before it, it is
// made room for before the request.
func TestDocumentsAreCountedBeforeTheRequest(t *testing.T) {
	text := strings.Repeat("a line of the minutes\n", 700) // 15 KB, about 3900 tokens
	p := writeFile(t, t.TempDir(), "minutes.txt", []byte(text))
	answer, compactions, reqs := mediaChat(t, 700, "Summarise the minutes.",
		[]llm.Part{{Type: llm.PartFile, MIME: "text/plain", Path: p, Name: "minutes.txt", Size: int64(len(text))}})
	if !strings.HasPrefix(answer, "answer to Summarise th") {
		t.Fatalf("answer %q", answer)
	}
	madeRoomAhead(t, reqs, compactions)
}

// madeRoomAhead checks that a chat with media was compacted at the threshold, before a
// request: no request went past the model's 6000 tokens, and none was refused for it.
func madeRoomAhead(t *testing.T, reqs []openaitest.Request, compactions []string) {
	t.Helper()
	for i, r := range reqs {
		if n := openaitest.Tokens(r.Body); n > 6000 {
			t.Errorf("request %d of %d tokens went to a model of 6000", i, n)
		}
	}
	if len(compactions) == 0 || slices.ContainsFunc(compactions, func(c string) bool { return strings.HasPrefix(c, "overflow/") }) ||
		!strings.HasPrefix(compactions[0], "threshold/") {
		t.Fatalf("compactions %v; want one at the threshold, none after a refusal", compactions)
	}
}
