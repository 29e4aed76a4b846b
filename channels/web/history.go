package web

import (
	"slices"
	"strings"
	"sync"
)

// The channel keeps a short transcript of each chat so that a reloaded page shows the
// conversation again. It lives here rather than in the page's storage because the server
// sees every answer, including one that finished while the page was reloading or closed,
// and every tab of a chat shows the same. It is memory only and bounded: after a restart
// the page starts empty, while the model's own history is kept by the session store.
const (
	historyEntries  = 100       // per chat, oldest dropped first
	historyBytes    = 256 << 10 // text per chat
	historyChats    = 128       // chats remembered; the least recently used is forgotten
	historyEntryMax = 32 << 10  // one entry's text
)

// historyEntry is one line of the transcript as the page renders it.
type historyEntry struct {
	Role    string     `json:"role"`               // "user" or "assistant"
	ID      string     `json:"id,omitempty"`       // user: the client's message id
	ReplyTo string     `json:"reply_to,omitempty"` // assistant: the user message it answers
	Text    string     `json:"text,omitempty"`
	Voice   bool       `json:"voice,omitempty"` // user: a voice note
	Error   bool       `json:"error,omitempty"` // assistant: the answer failed; Text says why
	Parts   []wirePart `json:"parts,omitempty"` // media of the message or answer (pictures by URL)
	// Streaming marks an answer still being written (only in hello, never kept): Text is
	// what it said so far, and its next frames follow on the socket.
	Streaming bool `json:"streaming,omitempty"`
}

func (e historyEntry) size() int {
	n := len(e.Text) + 64
	for _, p := range e.Parts {
		n += len(p.Text) + len(p.URL) + len(p.Name) + 64
	}
	return n
}

type transcript struct {
	entries []historyEntry
	bytes   int
	used    uint64 // recency stamp for eviction
	// gen changes when /new starts the transcript over, so that an answer of the ended
	// conversation (stopped by that /new, its done sent after the clear) stays out of it.
	gen uint64
	// trimmed are the ids of the latest questions cut from the front (at most
	// historyEntries): an answer to one of them, arriving late after a long queue, would sit
	// before everything kept, so it is not kept either.
	trimmed []string
}

type histories struct {
	mu     sync.Mutex
	byChat map[string]*transcript
	clock  uint64
}

func newHistories() *histories { return &histories{byChat: map[string]*transcript{}} }

// add appends e to chat's transcript, dropping the oldest entries past the bounds.
func (h *histories) add(chat string, e historyEntry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.addLocked(h.chatLocked(chat), e)
}

// chatLocked returns chat's transcript, made (and the least recently used one forgotten) if
// need be, marked as just used.
func (h *histories) chatLocked(chat string) *transcript {
	t := h.byChat[chat]
	if t == nil {
		if len(h.byChat) >= historyChats {
			h.evictLocked()
		}
		t = &transcript{}
		h.byChat[chat] = t
	}
	h.clock++
	t.used = h.clock
	return t
}

// addLocked appends e and trims the oldest exchanges (a question with its answers) past
// the bounds, so that the transcript never starts with an answer whose question was cut.
func (h *histories) addLocked(t *transcript, e historyEntry) {
	h.insertLocked(t, len(t.entries), e)
}

func (h *histories) insertLocked(t *transcript, at int, e historyEntry) {
	e.Text = clipText(e.Text, historyEntryMax)
	t.entries = slices.Insert(t.entries, at, e)
	t.bytes += e.size()
	for len(t.entries) > 1 && (len(t.entries) > historyEntries || t.bytes > historyBytes) {
		head := t.entries[0]
		t.dropFront()
		if head.Role != "user" || head.ID == "" {
			continue
		}
		for len(t.entries) > 0 && t.entries[0].Role == "assistant" && t.entries[0].ReplyTo == head.ID {
			t.dropFront()
		}
		if len(t.trimmed) >= historyEntries {
			t.trimmed = slices.Delete(t.trimmed, 0, 1)
		}
		t.trimmed = append(t.trimmed, head.ID)
	}
}

func (t *transcript) dropFront() {
	t.bytes -= t.entries[0].size()
	t.entries[0] = historyEntry{}
	t.entries = t.entries[1:]
}

// evictLocked forgets the least recently used chat.
func (h *histories) evictLocked() {
	var oldest string
	var stamp uint64
	for k, t := range h.byChat {
		if oldest == "" || t.used < stamp {
			oldest, stamp = k, t.used
		}
	}
	delete(h.byChat, oldest)
}

// remove drops the user entry id (a message the gateway did not take).
func (h *histories) remove(chat, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.byChat[chat]
	if t == nil {
		return
	}
	for i := len(t.entries) - 1; i >= 0; i-- {
		if e := t.entries[i]; e.Role == "user" && e.ID == id {
			t.bytes -= e.size()
			t.entries = append(t.entries[:i], t.entries[i+1:]...)
			return
		}
	}
}

// clear starts chat's transcript over (/new).
func (h *histories) clear(chat string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	// Kept even when empty: the new generation must outlive the answers of the old one.
	t := h.chatLocked(chat)
	*t = transcript{used: t.used, gen: t.used}
}

// generation names chat's conversation as of now; an answer takes it when its stream opens
// and hands it to addAnswer.
func (h *histories) generation(chat string) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.byChat[chat]; t != nil {
		return t.gen
	}
	return 0
}

// addAnswer adds an answer (done or error) unless its stream opened in a conversation that
// /new has ended since: the page dropped that answer when the user started over.
//
// An answer goes right after its question (and that question's earlier answers), where the
// page shows it, not after the questions queued behind it meanwhile; so each question is
// followed by its own answer and the bounds cut whole exchanges. An answer whose question
// the transcript never had (one sent after a restart, a notice) goes at the end.
func (h *histories) addAnswer(chat string, gen uint64, e historyEntry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.byChat[chat]; t != nil && t.gen != gen {
		return
	}
	t := h.chatLocked(chat)
	if e.ReplyTo == "" {
		h.addLocked(t, e)
		return
	}
	if slices.Contains(t.trimmed, e.ReplyTo) {
		return
	}
	q := slices.IndexFunc(t.entries, func(x historyEntry) bool { return x.Role == "user" && x.ID == e.ReplyTo })
	if q < 0 {
		h.addLocked(t, e)
		return
	}
	at := q + 1
	for at < len(t.entries) && t.entries[at].Role == "assistant" && t.entries[at].ReplyTo == e.ReplyTo {
		at++
	}
	h.insertLocked(t, at, e)
}

// get returns a copy of chat's transcript, oldest first.
func (h *histories) get(chat string) []historyEntry {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.byChat[chat]
	if t == nil {
		return nil
	}
	h.clock++
	t.used = h.clock
	return append([]historyEntry(nil), t.entries...)
}

// startsOver reports whether text is the command that starts a new conversation, after
// which the transcript starts over too.
func startsOver(text string) bool {
	text = strings.TrimSpace(text)
	if !strings.HasPrefix(text, "/") {
		return false
	}
	first, _, _ := strings.Cut(text[1:], " ")
	first, _, _ = strings.Cut(first, "@")
	first = strings.ToLower(first)
	return first == "new" || first == "reset"
}

// clipText shortens s to at most n bytes on a rune boundary, marking the cut.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
