package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"gateway/internal/audio"
	"gateway/internal/llm"
	"gateway/internal/media"
)

// How large the images of each provider are sent: OpenAI's high detail fits an image in
// 2048×2048 and then its short side in 768 (anything larger is scaled down by OpenAI and
// billed for nothing); Anthropic wants the long side at most 1568 and about 1.15 MP.
var (
	openAIImageBounds    = media.Bounds{Long: 2048, Short: 768}
	anthropicImageBounds = media.Bounds{Long: 1568, Pixels: 1_150_000}
)

const (
	// maxRequestImages bounds the images of one request: the newest are sent, older ones
	// are named in words. It is the most one message carries on any platform (a Telegram
	// album, Discord's and Slack's attachments, the web chat's files), so that a message
	// is always seen whole.
	maxRequestImages = 10
	// maxImageFile bounds an image file read from disk.
	maxImageFile = 50 << 20
	// mediaCacheBytes bounds what one session keeps of its prepared media (scaled images,
	// document text), so that a conversation is not decoded again for every model call.
	mediaCacheBytes = 8 << 20
)

// imageBounder is implemented by providers that send images; others get OpenAI's bounds.
type imageBounder interface{ imageBounds() media.Bounds }

// mediaProvider stands in front of a session's provider. Before each call it turns the
// media parts of the conversation into what the model can take: images read from disk,
// scaled to the provider's useful size (Part.Data), or described in words when the model
// cannot see; documents as bounded text with their names. When the provider refuses images
// for the model, the call is made once more without them, and the model is told what was
// left out (and later calls of the session to that model leave them out from the start).
type mediaProvider struct {
	Provider
	textOnly bool
	// docBytes bounds the text of the documents of one message, shared among them: what the
	// model's window leaves room for, at most media.DefaultMaxDocumentText each.
	docBytes int
	log      *slog.Logger
	cache    *mediaCache

	mu      sync.Mutex
	refused map[string]bool // models that refused images
}

func withMedia(p Provider, textOnly bool, b budget, log *slog.Logger) Provider {
	if m, ok := p.(*mediaProvider); ok {
		p = m.Provider
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &mediaProvider{Provider: p, textOnly: textOnly, docBytes: documentBytes(b), log: log,
		cache: newMediaCache(mediaCacheBytes), refused: map[string]bool{}}
}

// minDocumentText is the least text a document is given, however small the window.
const minDocumentText = 2000

// documentBytes is the text the documents of one message (or one tool result) may bring:
// half of what a request may hold, at a pessimistic 3 bytes per token, so that a file sent
// to a model with a small window is read in part rather than refused as a conversation too
// long (which /new would not mend: the same file would not fit either).
func documentBytes(b budget) int {
	return min(max(b.threshold/2*3, minDocumentText), media.DefaultMaxDocumentText)
}

func (m *mediaProvider) Stream(ctx context.Context, req *Request, onDelta func(string)) (*Response, error) {
	if !hasParts(req.Messages) {
		return m.Provider.Stream(ctx, req, onDelta)
	}
	return m.streamParts(ctx, req, onDelta)
}

// streamParts sends a request with media; Stream's own frame stays small, as it is under
// every model call (see Session.newRun).
func (m *mediaProvider) streamParts(ctx context.Context, req *Request, onDelta func(string)) (*Response, error) {
	m.mu.Lock()
	refused := m.refused[req.Model]
	m.mu.Unlock()
	mode := sendImages
	switch {
	case m.textOnly:
		mode = describeImages
	case refused:
		mode = refusedImages
	}
	out, sent := m.prepare(ctx, req, mode)
	resp, err := m.Provider.Stream(ctx, out, onDelta)
	if err == nil || sent == 0 || !refusesImages(err) {
		return resp, err
	}
	m.mu.Lock()
	m.refused[req.Model] = true
	m.mu.Unlock()
	m.log.Warn("the model refused images; sending the request again without them", "provider", m.Name(), "model", req.Model, "err", err)
	out, _ = m.prepare(ctx, req, refusedImages)
	return m.Provider.Stream(ctx, out, onDelta)
}

// refusesImages reports a provider's answer that the model does not take images: a 4xx
// about images, vision or modalities (OpenAI: "image_url is only supported by certain
// models", Anthropic: "does not support image input", vLLM: "not a multimodal model").
func refusesImages(err error) bool {
	var pe *ProviderError
	if !errors.As(err, &pe) || pe.Status < 400 || pe.Status >= 500 || pe.Status == 429 || pe.Status == 401 || pe.Status == 403 {
		return false
	}
	text := strings.ToLower(pe.Message)
	if pe.Err != nil {
		text += " " + strings.ToLower(pe.Err.Error())
	}
	for _, w := range []string{"image", "vision", "multimodal", "modality", "modalities"} {
		if strings.Contains(text, w) {
			return true
		}
	}
	return false
}

func hasParts(msgs []llm.Message) bool {
	for i := range msgs {
		if len(msgs[i].Parts) > 0 {
			return true
		}
	}
	return false
}

type imageMode int

const (
	sendImages     imageMode = iota
	describeImages           // the profile says the model cannot see
	refusedImages            // the provider refused images for this model
)

// prepare returns a copy of req whose media parts are resolved, and how many images it
// carries. Messages without parts are shared, never changed.
func (m *mediaProvider) prepare(ctx context.Context, req *Request, mode imageMode) (*Request, int) {
	bounds := openAIImageBounds
	if b, ok := m.Provider.(imageBounder); ok {
		bounds = b.imageBounds()
	}
	// The newest images are sent; count from the end.
	budget := make(map[[2]int]bool)
	n := 0
	for i := len(req.Messages) - 1; i >= 0 && n < maxRequestImages; i-- {
		for j, p := range req.Messages[i].Parts {
			if p.Type == llm.PartImage && n < maxRequestImages {
				budget[[2]int{i, j}] = true
				n++
			}
		}
	}
	// Images after the last answer are new to the model: left out, they were never seen.
	answered := -1
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == llm.RoleAssistant {
			answered = i
			break
		}
	}
	out := *req
	out.Messages = make([]llm.Message, len(req.Messages))
	sent := 0
	for i, msg := range req.Messages {
		if len(msg.Parts) == 0 {
			out.Messages[i] = msg
			continue
		}
		var notes []string
		var parts []llm.Part
		docMax := m.docBytes / max(countFiles(msg.Parts), 1)
		for j, p := range msg.Parts {
			name := partName(p)
			switch {
			case p.Type == llm.PartImage && mode == describeImages:
				notes = append(notes, fmt.Sprintf("[image %s: this model cannot see images, so it was not shown]", m.describe(p)))
			case p.Type == llm.PartImage && mode == refusedImages:
				notes = append(notes, fmt.Sprintf("[image %s left out: the model refused images, so you cannot see it; say so if it matters]", m.describe(p)))
			case p.Type == llm.PartImage && !budget[[2]int{i, j}] && i < answered:
				notes = append(notes, fmt.Sprintf("[image %s, sent earlier; not shown again]", name))
			case p.Type == llm.PartImage && !budget[[2]int{i, j}]:
				notes = append(notes, fmt.Sprintf("[image %s not shown: at most %d images are sent to you at once; say so if it matters]", name, maxRequestImages))
			case p.Type == llm.PartImage:
				im, err := m.image(p, bounds)
				if err != nil {
					notes = append(notes, fmt.Sprintf("[image %s: %s]", name, m.unavailable(name, err)))
					continue
				}
				parts = append(parts, llm.Part{Type: llm.PartImage, MIME: im.MIME, Path: p.Path, Name: p.Name, Size: int64(len(im.Data)), Data: im.Data})
				sent++
			default:
				notes = append(notes, m.document(ctx, p, docMax))
			}
		}
		text := strings.Join(notes, "\n")
		if msg.Content != "" {
			if text != "" {
				text += "\n\n"
			}
			text += msg.Content
		}
		msg.Content, msg.Parts = text, parts
		out.Messages[i] = msg
	}
	return &out, sent
}

// countFiles is how many of parts are documents (anything not an image).
func countFiles(parts []llm.Part) int {
	n := 0
	for _, p := range parts {
		if p.Type != llm.PartImage {
			n++
		}
	}
	return n
}

func partName(p llm.Part) string {
	name := p.Name
	if name == "" {
		name = filepath.Base(p.Path)
	}
	return name
}

// describe names an image in words: its name, type, size and dimensions when readable
// (from the file's header: the picture is not decoded).
func (m *mediaProvider) describe(p llm.Part) string {
	key, err := cacheKey("desc", p.Path, "")
	if err != nil {
		return fmt.Sprintf("%s (no longer available)", partName(p))
	}
	if v, ok := m.cache.get(key); ok {
		return v.text
	}
	bits := []string{}
	if p.MIME != "" {
		bits = append(bits, p.MIME)
	}
	if f, err := os.Open(p.Path); err == nil {
		head, _ := io.ReadAll(io.LimitReader(f, 256<<10)) // headers, EXIF included
		if w, h, err := media.ImageSize(head); err == nil {
			bits = append(bits, fmt.Sprintf("%d×%d", w, h))
		}
		if st, err := f.Stat(); err == nil {
			bits = append(bits, humanSize(st.Size()))
		}
		f.Close()
	}
	text := fmt.Sprintf("%s (%s)", partName(p), strings.Join(bits, ", "))
	m.cache.put(key, cached{text: text}, int64(len(text))+256)
	return text
}

// unavailable says why a part could not be read, in words for the model, an outside
// provider: not the file's path under state_dir, nor what a converter wrote to stderr.
// The whole error goes to the log.
func (m *mediaProvider) unavailable(name string, err error) string {
	if errors.Is(err, fs.ErrNotExist) {
		return "no longer available (old files are deleted after a while)"
	}
	m.log.Warn("a file sent in the chat could not be read for the model", "file", name, "err", err)
	var pe *fs.PathError
	var re *audio.RunError
	switch {
	case errors.As(err, &re):
		return "could not be read (" + re.Program + " failed)"
	case errors.As(err, &pe):
		return "could not be read: " + pe.Err.Error()
	}
	return "could not be read: " + err.Error()
}

// image reads and scales an image, through the cache.
func (m *mediaProvider) image(p llm.Part, b media.Bounds) (media.Image, error) {
	key, err := cacheKey("image", p.Path, fmt.Sprint(b))
	if err != nil {
		return media.Image{}, err
	}
	if v, ok := m.cache.get(key); ok {
		return v.image, v.err
	}
	im, err := readImage(p.Path, b)
	m.cache.put(key, cached{image: im, err: err}, int64(len(im.Data))+256)
	return im, err
}

func readImage(path string, b media.Bounds) (media.Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return media.Image{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return media.Image{}, err
	}
	if st.Size() > maxImageFile {
		return media.Image{}, fmt.Errorf("the file is %s, more than %s", humanSize(st.Size()), humanSize(maxImageFile))
	}
	data := make([]byte, st.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return media.Image{}, err
	}
	return media.PrepareImageWithin(data, b)
}

// document gives a file part as text for the model: a text document or PDF with its name
// and contents (bounded), anything else named and described.
func (m *mediaProvider) document(ctx context.Context, p llm.Part, maxText int) string {
	name := partName(p)
	key, err := cacheKey("doc", p.Path, strconv.Itoa(maxText))
	if err != nil {
		return fmt.Sprintf("[file %s: %s]", name, m.unavailable(name, err))
	}
	if v, ok := m.cache.get(key); ok {
		return v.text
	}
	text := m.documentText(ctx, p, name, maxText)
	if ctx.Err() == nil { // a cut-off pdftotext is not remembered
		m.cache.put(key, cached{text: text}, int64(len(text))+256)
	}
	return text
}

func (m *mediaProvider) documentText(ctx context.Context, p llm.Part, name string, maxText int) string {
	doc, err := media.DocumentText(ctx, p.Path, p.MIME, name, max(maxText, minDocumentText))
	switch {
	case errors.Is(err, media.ErrNotText):
		what := []string{}
		if p.MIME != "" {
			what = append(what, p.MIME)
		}
		if st, err := os.Stat(p.Path); err == nil {
			what = append(what, humanSize(st.Size()))
		}
		return fmt.Sprintf("[file %s (%s): not a text document or PDF, so its contents cannot be shown to you]", name, strings.Join(what, ", "))
	case err != nil:
		return fmt.Sprintf("[file %s: %s]", name, m.unavailable(name, err))
	}
	switch {
	case doc.Truncated: // its start may be blank; the file is not
	case doc.Text == "":
		// Said in words: an empty file's markers alone read as if its text went missing.
		return fmt.Sprintf("[file %s: the file is empty]", name)
	case strings.TrimSpace(doc.Text) == "":
		return fmt.Sprintf("[file %s: the file holds only blank lines and spaces, no text]", name)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[file %s]\n%s", name, strings.TrimRight(doc.Text, "\n"))
	if doc.Truncated {
		fmt.Fprintf(&b, "\n[… the rest of %s is cut: only its first %s are shown]", name, humanSize(int64(len(doc.Text))))
	}
	fmt.Fprintf(&b, "\n[end of file %s]", name)
	return b.String()
}

// cacheKey names a prepared file: its path, size and time of change, so that a file
// replaced under the same path is read again.
func cacheKey(kind, path, extra string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s|%s|%d|%d|%s", kind, path, st.Size(), st.ModTime().UnixNano(), extra), nil
}

func humanSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%d KB", (n+512)>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// mediaCache keeps prepared media of one session, the oldest forgotten first past a
// bound of bytes. Safe for concurrent use.
type mediaCache struct {
	mu    sync.Mutex
	max   int64
	bytes int64
	byKey map[string]*cacheEntry
	order []*cacheEntry
}

type cached struct {
	image media.Image
	text  string
	err   error
}

type cacheEntry struct {
	key  string
	v    cached
	size int64
}

func newMediaCache(max int64) *mediaCache {
	return &mediaCache{max: max, byKey: map[string]*cacheEntry{}}
}

func (c *mediaCache) get(key string) (cached, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[key]
	if !ok {
		return cached{}, false
	}
	return e.v, true
}

func (c *mediaCache) put(key string, v cached, size int64) {
	if size > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[key]; ok {
		return
	}
	e := &cacheEntry{key: key, v: v, size: size}
	c.byKey[key] = e
	c.order = append(c.order, e)
	c.bytes += size
	for c.bytes > c.max && len(c.order) > 0 {
		old := c.order[0]
		c.order[0] = nil
		c.order = c.order[1:]
		delete(c.byKey, old.key)
		c.bytes -= old.size
	}
}
