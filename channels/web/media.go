package web

import (
	"bytes"
	"mime"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"gateway/channels"
)

// The media store remembers what the channel may serve under /media/{id} and the uploads it
// wrote. It is bounded: past these limits the oldest entries are forgotten and files the
// channel wrote are deleted, so a chatty user cannot fill the disk or memory.
const (
	maxMediaEntries = 256
	maxMediaBytes   = 256 << 20 // parts sent plus uploaded files
	maxPartBytes    = 64 << 20  // one part sent; a larger one is replaced by a note
)

type mediaItem struct {
	id     string
	path   string // an upload on disk; "" when data holds the bytes
	data   []byte // a part sent, served under /media/{id}
	mime   string
	size   int64 // counted against maxMediaBytes
	owned  bool  // written by the channel: deleted when forgotten
	public bool  // served under /media/{id}
	added  time.Time
}

type mediaStore struct {
	mu    sync.Mutex
	byID  map[string]*mediaItem
	order []*mediaItem // oldest first
	bytes int64
}

func newMediaStore() *mediaStore {
	return &mediaStore{byID: map[string]*mediaItem{}}
}

func (s *mediaStore) add(it *mediaItem) {
	it.added = time.Now()
	s.mu.Lock()
	s.byID[it.id] = it
	s.order = append(s.order, it)
	s.bytes += it.size
	var evicted []*mediaItem
	for len(s.order) > 1 && (len(s.order) > maxMediaEntries || s.bytes > maxMediaBytes) {
		old := s.order[0]
		s.order = s.order[1:]
		delete(s.byID, old.id)
		s.bytes -= old.size
		evicted = append(evicted, old)
	}
	s.mu.Unlock()
	for _, old := range evicted {
		old.remove()
	}
}

func (it *mediaItem) remove() {
	if it.owned && it.path != "" {
		_ = os.Remove(it.path)
	}
}

func (s *mediaStore) get(id string) *mediaItem {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[id]
}

// addUpload tracks a voice note the channel wrote, so that it is cleaned up in time.
func (s *mediaStore) addUpload(path string, size int64) {
	s.add(&mediaItem{id: "upload-" + randomID(12), path: path, size: size, owned: true})
}

// forget deletes an upload the gateway did not take.
func (s *mediaStore) forget(path string) {
	s.mu.Lock()
	var found *mediaItem
	for i, it := range s.order {
		if it.path == path {
			found = it
			s.order = append(s.order[:i], s.order[i+1:]...)
			delete(s.byID, it.id)
			s.bytes -= it.size
			break
		}
	}
	s.mu.Unlock()
	if found != nil {
		found.remove()
	}
}

// clear forgets everything and deletes the channel's own files.
func (s *mediaStore) clear() {
	s.mu.Lock()
	items := s.order
	s.order, s.byID, s.bytes = nil, map[string]*mediaItem{}, 0
	s.mu.Unlock()
	for _, it := range items {
		it.remove()
	}
}

// publish makes a part of an answer renderable by the page: media gets a /media URL. The
// bytes are read now, so the page can still load them when the file is gone.
func (c *Channel) publish(p channels.Part) (wirePart, error) {
	wp := wirePart{Type: string(p.Type), Text: p.Text, MIME: p.MIME, Name: p.Name, Size: p.Size, Duration: p.Duration, Voice: p.Voice}
	if p.Type == channels.PartText {
		return wp, nil
	}
	b, err := channels.ReadPart(p, maxPartBytes)
	if err != nil {
		return wp, err
	}
	it := &mediaItem{id: randomID(16), data: b, size: int64(len(b)), mime: servedType(p.MIME, p.Type), public: true}
	wp.Size = it.size
	c.media.add(it)
	wp.URL = "/media/" + it.id
	wp.MIME = it.mime
	return wp, nil
}

// servedType is the Content-Type a part is served with: audio and images as themselves,
// anything else as a download, so that nothing served here is ever run as a page.
func servedType(m string, t channels.PartType) string {
	mt, _, err := mime.ParseMediaType(m)
	if err == nil && (strings.HasPrefix(mt, "audio/") || strings.HasPrefix(mt, "image/") && mt != "image/svg+xml") {
		return mt
	}
	if err == nil && t == channels.PartAudio && mt == "application/ogg" {
		return "audio/ogg"
	}
	return "application/octet-stream"
}

func (c *Channel) serveMedia(w http.ResponseWriter, r *http.Request) {
	if !c.mediaAllowed(r) {
		http.Error(w, "The web chat's token is required.", http.StatusUnauthorized)
		return
	}
	it := c.media.get(r.PathValue("id"))
	if it == nil || !it.public {
		http.Error(w, "This media is no longer available.", http.StatusNotFound)
		return
	}
	h := w.Header()
	h.Set("Content-Type", it.mime)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	h.Set("Cache-Control", "private, max-age=3600")
	if it.mime == "application/octet-stream" {
		h.Set("Content-Disposition", "attachment")
	}
	http.ServeContent(w, r, "", it.added, bytes.NewReader(it.data))
}
