// Package anthropictest is a fake Anthropic Messages API for tests: an httptest server on
// 127.0.0.1 that answers POST /v1/messages from a script, streaming (Anthropic's SSE event
// stream) or not, with tool use, injected failures and slow replies, and records every
// request. It refuses, as the API does, a request whose turns are out of the API's order
// (see turnOrder). Point the real SDK at URL().
package anthropictest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"gateway/internal/fakeserver"
)

// ToolUse is a tool call in a reply or a recorded request.
type ToolUse struct {
	ID    string
	Name  string
	Input string // JSON text
}

// Reply is one scripted answer.
type Reply struct {
	Text string
	// Chunks, if set, are streamed as these text deltas (Text is then ignored).
	Chunks     []string
	ToolUses   []ToolUse
	Delay      time.Duration // before the response headers
	ChunkDelay time.Duration // between streamed chunks
	// Status, when set (>= 400), answers with this HTTP status and an error body.
	Status     int
	Message    string
	RetryAfter string
	// ErrorPage, with Status, is sent as a plain-text body instead of the API's JSON
	// error, as a proxy in front of the API answers.
	ErrorPage string
	// StreamError, when set, is the type of an error event (overloaded_error, ...) that
	// ends the stream after the first text block, as the API does when it fails mid-answer.
	StreamError string
	// Truncated ends the response cleanly after the text, with no stop reason and no
	// message_stop: a server or proxy that hung up between two events.
	Truncated bool
	// StopReason, when set, ends the answer with it ("max_tokens", "refusal") in place of
	// "end_turn" or "tool_use".
	StopReason string
}

// Block is a decoded content block of a recorded request.
type Block struct {
	Type      string // text, image, tool_use, tool_result
	MIME      string // image: the base64 source's media_type
	Data      []byte // image: the decoded bytes
	Text      string // text, or a tool_result's content
	ID        string // tool_use id
	Name      string
	Input     string
	ToolUseID string // tool_result
	IsError   bool
}

// Message is a decoded message of a recorded request.
type Message struct {
	Role   string
	Blocks []Block
}

// Request is a recorded request.
type Request struct {
	Time      time.Time
	Header    http.Header
	Model     string
	Stream    bool
	MaxTokens int
	System    string
	Messages  []Message
	Tools     []string
	// ToolChoice is the tool_choice's type ("auto", "any", "tool", "none"); "" when not sent.
	ToolChoice string
	// Cache is what the prompt cache did for the request (see SetCacheMin).
	Cache CacheUse
	Body  json.RawMessage
}

const maxBody = 8 << 20

// Server is the fake API. Safe for concurrent use.
type Server struct {
	fs    *fakeserver.Server
	mux   *http.ServeMux
	fails fakeserver.Failures
	reqs  fakeserver.Log[Request]

	mu       sync.Mutex
	script   fakeserver.Script[Request, Reply]
	limit    int // LimitContext
	cache    map[[32]byte]bool
	cacheMin int // SetCacheMin
}

// NewServer starts a server on 127.0.0.1.
func NewServer() *Server {
	s := &Server{mux: http.NewServeMux()}
	s.mux.HandleFunc("POST /v1/messages", s.messages)
	s.fs = fakeserver.New(s.mux)
	return s
}

// URL is the base URL to configure (llm.base_url); the SDK appends /v1/messages.
func (s *Server) URL() string { return s.fs.URL }

// Close stops the server; slow replies in progress end at once.
func (s *Server) Close() { s.fs.Close() }

// Push appends replies to the script.
func (s *Server) Push(r ...Reply) { s.script.Push(r...) }

// SetFunc sets the func that answers when the script is empty (default: "ok").
func (s *Server) SetFunc(fn func(Request) Reply) { s.script.SetFunc(fn) }

// FailNext makes the next n requests fail: status f.Code(), an error body with f.Message
// (default: the status text), and a Retry-After header (whole seconds, rounded up) when
// f.RetryAfter > 0. f.Method, if set, must be "messages".
func (s *Server) FailNext(n int, f fakeserver.Failure) { s.fails.Add(n, f) }

// failure takes a scripted failure, if any, into rep.
func (s *Server) failure(rep *Reply) bool {
	f, ok := s.fails.Take("messages", "", nil)
	if !ok {
		return false
	}
	*rep = Reply{Status: f.Code(), Message: f.Text()}
	if f.RetryAfter > 0 {
		rep.RetryAfter = strconv.Itoa(f.Seconds())
	}
	return true
}

// LimitContext makes the server a model with a context window of tokens: a request
// counted above it (a token is 4 bytes of the JSON body) is answered 400 the way the real
// API says the context is too long, and every answer reports the request's count as its
// input tokens. 0 lifts the limit.
func (s *Server) LimitContext(tokens int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit = tokens
}

// Tokens is how the server counts a request body against LimitContext.
func Tokens(body []byte) int { return len(body) / 4 }

// Requests returns the recorded requests, in order.
func (s *Server) Requests() []Request {
	return s.reqs.All()
}

type wireBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	IsError   bool            `json:"is_error"`
	Content   json.RawMessage `json:"content"`
	Source    struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
	} `json:"source"`
}

type wireRequest struct {
	Model     string          `json:"model"`
	Stream    bool            `json:"stream"`
	MaxTokens int             `json:"max_tokens"`
	System    json.RawMessage `json:"system"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
	ToolChoice struct {
		Type string `json:"type"`
	} `json:"tool_choice"`
}

// blocksOf reads content given as a string or as an array of blocks.
func blocksOf(raw json.RawMessage) []wireBlock {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []wireBlock{{Type: "text", Text: s}}
	}
	var bs []wireBlock
	_ = json.Unmarshal(raw, &bs)
	return bs
}

func textOf(raw json.RawMessage) string {
	var b strings.Builder
	for _, x := range blocksOf(raw) {
		b.WriteString(x.Text)
	}
	return b.String()
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "body too large", "")
		return
	}
	var wr wireRequest
	if err := json.Unmarshal(body, &wr); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON: "+err.Error(), "")
		return
	}
	req := Request{Time: time.Now(), Header: r.Header.Clone(), Model: wr.Model, Stream: wr.Stream, MaxTokens: wr.MaxTokens,
		System: textOf(wr.System), ToolChoice: wr.ToolChoice.Type, Body: body}
	for _, m := range wr.Messages {
		msg := Message{Role: m.Role}
		for _, b := range blocksOf(m.Content) {
			blk := Block{Type: b.Type, Text: b.Text, ID: b.ID, Name: b.Name, ToolUseID: b.ToolUseID, IsError: b.IsError}
			if len(b.Input) > 0 {
				blk.Input = string(b.Input)
			}
			if b.Type == "tool_result" {
				blk.Text = textOf(b.Content)
			}
			if b.Type == "image" && b.Source.Type == "base64" {
				blk.MIME = b.Source.MediaType
				blk.Data, _ = base64.StdEncoding.DecodeString(b.Source.Data)
			}
			msg.Blocks = append(msg.Blocks, blk)
		}
		req.Messages = append(req.Messages, msg)
	}
	for _, t := range wr.Tools {
		req.Tools = append(req.Tools, t.Name)
	}
	// As the API does: a text block of nothing but whitespace refuses the whole request,
	// and so does a tool_use or tool_result block when no tools are defined.
	blank, toolBlocks := false, false
	for _, m := range req.Messages {
		for _, b := range m.Blocks {
			blank = blank || b.Type == "text" && strings.TrimSpace(b.Text) == ""
			toolBlocks = toolBlocks || b.Type == "tool_use" || b.Type == "tool_result"
		}
	}

	order := turnOrder(req.Messages)

	s.mu.Lock()
	var cacheErr string
	if order == "" {
		req.Cache, cacheErr = s.useCache(body)
	}
	s.reqs.Add(req)
	n := s.reqs.Len()
	limit := s.limit
	var rep Reply
	switch {
	case order != "":
		rep = Reply{Status: http.StatusBadRequest, Message: order}
	case cacheErr != "":
		rep = Reply{Status: http.StatusBadRequest, Message: cacheErr}
	case blank:
		rep = Reply{Status: http.StatusBadRequest, Message: "messages: text content blocks must contain non-whitespace text"}
	case toolBlocks && len(req.Tools) == 0:
		rep = Reply{Status: http.StatusBadRequest, Message: "Requests which include `tool_use` or `tool_result` blocks must define tools."}
	case limit > 0 && Tokens(body) > limit:
		rep = Reply{Status: http.StatusBadRequest, Message: fmt.Sprintf("prompt is too long: %d tokens > %d maximum", Tokens(body), limit)}
	case s.failure(&rep):
	default:
		var scripted bool
		if rep, scripted = s.script.Pop(); scripted {
			break
		}
		if fn := s.script.Func(); fn != nil {
			s.mu.Unlock()
			rep = fn(req)
			s.mu.Lock()
			break
		}
		rep = Reply{Text: "ok"}
	}
	s.mu.Unlock()

	if !s.wait(r, rep.Delay) {
		return
	}
	if rep.Status >= 400 && rep.ErrorPage != "" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(rep.Status)
		_, _ = io.WriteString(w, rep.ErrorPage)
		return
	}
	if rep.Status >= 400 {
		writeError(w, rep.Status, rep.Message, rep.RetryAfter)
		return
	}
	in := 10
	if limit > 0 || req.Cache.Breakpoints > 0 {
		in = Tokens(body)
	}
	// As the API counts: input_tokens is what neither the cache read nor wrote.
	usage := map[string]any{"input_tokens": max(0, in-req.Cache.Read-req.Cache.Written),
		"cache_read_input_tokens": req.Cache.Read, "cache_creation_input_tokens": req.Cache.Written}
	id := fmt.Sprintf("msg_%d", n)
	if !wr.Stream {
		s.complete(w, id, wr.Model, rep, usage)
		return
	}
	s.stream(w, r, id, wr.Model, rep, usage)
}

// turnOrder checks the order the API wants of a request's messages and returns its 400
// message, or "" when the order is valid: only user and assistant roles, the user first,
// the two alternating, and every tool_use block of an answer followed, in the next message
// and before anything else there, by its tool_result (a tool_result answering no tool_use of
// the message before is refused too). The API today combines consecutive turns of one role
// instead of refusing them; the fake refuses them, as the API once did, so that a request
// that would only be valid once combined (text before a tool_result) is noticed.
func turnOrder(msgs []Message) string {
	for i, m := range msgs {
		switch {
		case m.Role != "user" && m.Role != "assistant":
			return fmt.Sprintf("messages.%d.role: Input should be 'user' or 'assistant'", i)
		case i == 0 && m.Role != "user":
			return `messages: first message must use the "user" role`
		case i > 0 && msgs[i-1].Role == m.Role:
			return fmt.Sprintf(`messages: roles must alternate between "user" and "assistant", but found multiple %q roles in a row`, m.Role)
		}
		var uses []string
		if i > 0 {
			for _, b := range msgs[i-1].Blocks {
				if b.Type == "tool_use" {
					uses = append(uses, b.ID)
				}
			}
		}
		answered := map[string]bool{}
		lead := true // still among the blocks before anything that is not a tool_result
		for j, b := range m.Blocks {
			if b.Type != "tool_result" {
				lead = false
				continue
			}
			if !slices.Contains(uses, b.ToolUseID) {
				return fmt.Sprintf("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. "+
					"Each `tool_result` block must have a corresponding `tool_use` block in the previous message.", i, j, b.ToolUseID)
			}
			answered[b.ToolUseID] = answered[b.ToolUseID] || lead
		}
		if len(uses) > 0 {
			var missing []string
			for _, id := range uses {
				if !answered[id] {
					missing = append(missing, id)
				}
			}
			if len(missing) > 0 {
				return fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. "+
					"Each `tool_use` block must have a corresponding `tool_result` block in the next message.", i-1, strings.Join(missing, ", "))
			}
		}
	}
	// An answer that ends the request with tool_use blocks has no message after it.
	if n := len(msgs); n > 0 && msgs[n-1].Role == "assistant" {
		for _, b := range msgs[n-1].Blocks {
			if b.Type == "tool_use" {
				return fmt.Sprintf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. "+
					"Each `tool_use` block must have a corresponding `tool_result` block in the next message.", n-1, b.ID)
			}
		}
	}
	return ""
}

func (s *Server) wait(r *http.Request, d time.Duration) bool { return s.fs.Wait(r, d) }

func writeError(w http.ResponseWriter, status int, msg, retryAfter string) {
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	typ := "api_error"
	switch {
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case status == 529:
		typ = "overloaded_error"
	case status == http.StatusUnauthorized:
		typ = "authentication_error"
	case status < 500:
		typ = "invalid_request_error"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
}

func chunksOf(rep Reply) []string {
	if rep.Chunks != nil {
		return rep.Chunks
	}
	if rep.Text != "" {
		return []string{rep.Text}
	}
	return nil
}

func toolID(tu ToolUse, i int) string {
	if tu.ID != "" {
		return tu.ID
	}
	return fmt.Sprintf("toolu_%d", i+1)
}

func toolInput(tu ToolUse) string {
	if tu.Input == "" {
		return "{}"
	}
	return tu.Input
}

func (s *Server) complete(w http.ResponseWriter, id, model string, rep Reply, usage map[string]any) {
	var content []any
	if text := strings.Join(chunksOf(rep), ""); text != "" {
		content = append(content, map[string]any{"type": "text", "text": text})
	}
	for i, tu := range rep.ToolUses {
		content = append(content, map[string]any{"type": "tool_use", "id": toolID(tu, i), "name": tu.Name, "input": json.RawMessage(toolInput(tu))})
	}
	stop := "end_turn"
	if len(rep.ToolUses) > 0 {
		stop = "tool_use"
	}
	if rep.StopReason != "" {
		stop = rep.StopReason
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": content,
		"stop_reason": stop, "stop_sequence": nil, "usage": withOutput(usage, 5),
	})
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, id, model string, rep Reply, usage map[string]any) {
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	send := func(event string, data map[string]any) {
		data["type"] = event
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
		if fl != nil {
			fl.Flush()
		}
	}
	send("message_start", map[string]any{"message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": withOutput(usage, 1),
	}})
	idx := 0
	if chunks := chunksOf(rep); len(chunks) > 0 {
		send("content_block_start", map[string]any{"index": idx, "content_block": map[string]any{"type": "text", "text": ""}})
		send("ping", map[string]any{})
		for i, c := range chunks {
			if i > 0 && !s.wait(r, rep.ChunkDelay) {
				return
			}
			send("content_block_delta", map[string]any{"index": idx, "delta": map[string]any{"type": "text_delta", "text": c}})
		}
		send("content_block_stop", map[string]any{"index": idx})
		idx++
	}
	if rep.Truncated {
		return
	}
	if rep.StreamError != "" {
		send("error", map[string]any{"error": map[string]any{"type": rep.StreamError, "message": "the stream failed: " + rep.StreamError}})
		return
	}
	for i, tu := range rep.ToolUses {
		send("content_block_start", map[string]any{"index": idx, "content_block": map[string]any{"type": "tool_use", "id": toolID(tu, i), "name": tu.Name, "input": map[string]any{}}})
		in := toolInput(tu)
		half := len(in) / 2
		send("content_block_delta", map[string]any{"index": idx, "delta": map[string]any{"type": "input_json_delta", "partial_json": in[:half]}})
		send("content_block_delta", map[string]any{"index": idx, "delta": map[string]any{"type": "input_json_delta", "partial_json": in[half:]}})
		send("content_block_stop", map[string]any{"index": idx})
		idx++
	}
	stop := "end_turn"
	if len(rep.ToolUses) > 0 {
		stop = "tool_use"
	}
	if rep.StopReason != "" {
		stop = rep.StopReason
	}
	send("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 5}})
	send("message_stop", map[string]any{})
}

// withOutput is usage with output_tokens set, a copy.
func withOutput(usage map[string]any, n int) map[string]any {
	u := map[string]any{"output_tokens": n}
	for k, v := range usage {
		u[k] = v
	}
	return u
}
