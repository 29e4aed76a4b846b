// Package openaitest is a fake OpenAI-compatible API for tests: an httptest server on
// 127.0.0.1 that answers POST /chat/completions (also under /v1/) from a script, streaming
// (SSE) or not, with tool calls, injected failures and slow replies, and records every
// request. Point the real SDK at URL().
package openaitest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	_ "image/gif" // images the harness may send, for imageTokens
	_ "image/jpeg"
	_ "image/png"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"gateway/internal/fakeserver"
)

// ToolCall is a tool call in a reply or a recorded request.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string // JSON text
}

// Reply is one scripted answer.
type Reply struct {
	Text string
	// Chunks, if set, are streamed as these content deltas (Text is then ignored).
	Chunks    []string
	ToolCalls []ToolCall
	// Delay is waited before the response headers; ChunkDelay between streamed chunks.
	Delay      time.Duration
	ChunkDelay time.Duration
	// Hang keeps the stream open after the chunks until the client goes away (abort tests).
	Hang bool
	// Status, when set (>= 400), answers with this HTTP status and an error body.
	Status     int
	Message    string // error message for Status
	RetryAfter string // Retry-After header for Status
	// ErrorPage, with Status, is sent as a plain-text body instead of OpenAI's JSON error,
	// as a proxy in front of a model server answers.
	ErrorPage string
	// CutAfter, when > 0, drops the connection after this many chunks (a broken stream).
	CutAfter int
	// StreamError, when set, ends the stream after the chunks with an error event carrying
	// this message, as a server that fails mid-answer does.
	StreamError string
	// Truncated ends the response cleanly after the chunks, with no finish reason and no
	// "[DONE]": a server or proxy that hung up between two events.
	Truncated    bool
	InputTokens  int
	OutputTokens int
	// FloatNumbers writes the stream's indexes and token counts as 3.0 rather than 3, as
	// some OpenAI-compatible servers do.
	FloatNumbers bool

	// Code, with Status, is the error's code (insufficient_quota, context_length_exceeded).
	Code string
	// FinishReason, when set, ends the answer with it ("length", "content_filter") in place
	// of "stop" or "tool_calls".
	FinishReason string
}

// Message is a decoded message of a recorded request.
type Message struct {
	Role       string
	Content    string
	Images     []Image // image_url parts, in order
	ToolCalls  []ToolCall
	ToolCallID string
}

// Image is an image_url part of a recorded message. A data URL is decoded into MIME and
// Data (so a test can decode the pixels the model received); any other URL is kept in URL.
type Image struct {
	MIME   string
	Data   []byte
	URL    string
	Detail string
}

// Request is a recorded request.
type Request struct {
	Time     time.Time
	Path     string
	Header   http.Header
	Model    string
	Stream   bool
	Messages []Message
	Tools    []string // function names
	// ToolChoice is tool_choice when given as a string ("none", "auto", "required"), or
	// the type of the object given ("function", "allowed_tools"); "" when not sent.
	ToolChoice string
	Body       json.RawMessage
}

// toolName is what OpenAI accepts as a function name.
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// maxBody bounds a request body the server reads.
const maxBody = 8 << 20

// Server is the fake API. Safe for concurrent use.
type Server struct {
	fs    *fakeserver.Server
	mux   *http.ServeMux
	fails fakeserver.Failures
	reqs  fakeserver.Log[Request]

	mu     sync.Mutex
	script fakeserver.Script[Request, Reply]
	limit  int  // LimitContext
	strict bool // AlternateRoles
}

// NewServer starts a server on 127.0.0.1.
func NewServer() *Server {
	s := &Server{mux: http.NewServeMux()}
	s.mux.HandleFunc("POST /chat/completions", s.chat)
	s.mux.HandleFunc("POST /v1/chat/completions", s.chat)
	s.fs = fakeserver.New(s.mux)
	return s
}

// URL is the base URL to configure (llm.base_url), ending in /v1.
func (s *Server) URL() string { return s.fs.URL + "/v1" }

// Addr is the server's root URL (no /v1).
func (s *Server) Addr() string { return s.fs.URL }

// Close stops the server; slow replies in progress end at once.
func (s *Server) Close() { s.fs.Close() }

// Push appends replies to the script.
func (s *Server) Push(r ...Reply) { s.script.Push(r...) }

// SetFunc sets the func that answers when the script is empty (default: "ok").
func (s *Server) SetFunc(fn func(Request) Reply) { s.script.SetFunc(fn) }

// FailNext makes the next n requests fail: status f.Code(), an error body with f.Message
// (default: the status text), and a Retry-After header (whole seconds, rounded up) when
// f.RetryAfter > 0. f.Method, if set, must be "chat".
func (s *Server) FailNext(n int, f fakeserver.Failure) { s.fails.Add(n, f) }

// failure takes a scripted failure, if any, into rep.
func (s *Server) failure(rep *Reply) bool {
	f, ok := s.fails.Take("chat", "", nil)
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

// AlternateRoles makes the server a model with a strict chat template (Mistral's and
// Gemma's, served by vLLM or llama.cpp): one system message at most, and only first; then
// user and assistant turns that alternate, starting with the user (tool results stand
// between a call and the answer after it). A request otherwise is answered 400 with the
// template's error, as vLLM does.
func (s *Server) AlternateRoles(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.strict = on
}

// templateError is what a strict chat template says of msgs, "" when it takes them.
func templateError(msgs []Message) string {
	const alternate = "Conversation roles must alternate user/assistant/user/assistant/..."
	for i, m := range msgs {
		switch {
		case m.Role == "system" && i > 0:
			return "System role only supported at the beginning of the conversation"
		case m.Role == "assistant" && (i == 0 || msgs[i-1].Role == "system"):
			return alternate // the user speaks first
		case i > 0 && (m.Role == "user" || m.Role == "assistant") && msgs[i-1].Role == m.Role:
			return alternate
		}
	}
	return ""
}

// Tokens is how the server counts a request body against LimitContext: a token is 4 bytes
// of the JSON body, but an image counts as OpenAI counts it, not as the bytes of its data
// URL (see imageTokens).
func Tokens(body []byte) int {
	if !bytes.Contains(body, []byte(`"image_url"`)) {
		return len(body) / 4
	}
	var wr struct {
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &wr) != nil {
		return len(body) / 4
	}
	n, images := len(body), 0
	for _, m := range wr.Messages {
		for _, im := range contentImages(m.Content) {
			if t, ok := imageTokens(im); ok {
				n -= len("data:"+im.MIME+";base64,") + base64.StdEncoding.EncodedLen(len(im.Data))
				images += t
			}
		}
	}
	return n/4 + images
}

// imageTokens is what OpenAI counts for an image: 85 in low detail; in high detail (and
// auto) the image is scaled to fit 2048×2048, then its short side to 768, and each 512-px
// tile costs 170 more. ok is false when the image cannot be read.
func imageTokens(im Image) (int, bool) {
	if im.Data == nil {
		return 0, false
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(im.Data))
	if err != nil || cfg.Width <= 0 || cfg.Height <= 0 {
		return 0, false
	}
	if im.Detail == "low" {
		return 85, true
	}
	w, h := float64(cfg.Width), float64(cfg.Height)
	if f := 2048 / max(w, h); f < 1 {
		w, h = w*f, h*f
	}
	if f := 768 / min(w, h); f < 1 {
		w, h = w*f, h*f
	}
	tiles := math.Ceil(w/512) * math.Ceil(h/512)
	return 85 + 170*int(tiles), true
}

// Requests returns the recorded chat requests, in order.
func (s *Server) Requests() []Request {
	return s.reqs.All()
}

// wire forms of the request.
type wireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type wireRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCalls  []wireToolCall  `json:"tool_calls"`
		ToolCallID string          `json:"tool_call_id"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
}

// toolChoice names tool_choice as Request.ToolChoice does.
func toolChoice(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(raw, &o)
	return o.Type
}

// contentText reads message content given as a string or as an array of text parts.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String()
	}
	return ""
}

// contentImages reads the image_url parts of message content.
func contentImages(raw json.RawMessage) []Image {
	var parts []struct {
		Type     string `json:"type"`
		ImageURL struct {
			URL    string `json:"url"`
			Detail string `json:"detail"`
		} `json:"image_url"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return nil
	}
	var out []Image
	for _, p := range parts {
		if p.Type != "image_url" {
			continue
		}
		im := Image{URL: p.ImageURL.URL, Detail: p.ImageURL.Detail}
		if rest, ok := strings.CutPrefix(p.ImageURL.URL, "data:"); ok {
			if meta, data, ok := strings.Cut(rest, ","); ok && strings.HasSuffix(meta, ";base64") {
				if b, err := base64.StdEncoding.DecodeString(data); err == nil {
					im.MIME, im.Data, im.URL = strings.TrimSuffix(meta, ";base64"), b, ""
				}
			}
		}
		out = append(out, im)
	}
	return out
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "body too large", "", "")
		return
	}
	var wr wireRequest
	if err := json.Unmarshal(body, &wr); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON: "+err.Error(), "", "")
		return
	}
	req := Request{Time: time.Now(), Path: r.URL.Path, Header: r.Header.Clone(), Model: wr.Model, Stream: wr.Stream, ToolChoice: toolChoice(wr.ToolChoice), Body: body}
	for _, m := range wr.Messages {
		msg := Message{Role: m.Role, Content: contentText(m.Content), Images: contentImages(m.Content), ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		req.Messages = append(req.Messages, msg)
	}
	badTool := ""
	for i, t := range wr.Tools {
		req.Tools = append(req.Tools, t.Function.Name)
		if badTool == "" && !toolName.MatchString(t.Function.Name) {
			badTool = fmt.Sprintf("Invalid 'tools[%d].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.", i)
		}
	}

	s.mu.Lock()
	s.reqs.Add(req)
	n := s.reqs.Len()
	limit := s.limit
	var rep Reply
	switch {
	case s.strict && templateError(req.Messages) != "":
		rep = Reply{Status: http.StatusBadRequest, Message: templateError(req.Messages)}
	case badTool != "":
		// As OpenAI does: one tool name it cannot take refuses the whole request.
		rep = Reply{Status: http.StatusBadRequest, Message: badTool}
	case limit > 0 && Tokens(body) > limit:
		rep = Reply{Status: http.StatusBadRequest, Code: "context_length_exceeded", Message: fmt.Sprintf(
			"This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.",
			limit, Tokens(body))}
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
		writeError(w, rep.Status, rep.Message, rep.RetryAfter, rep.Code)
		return
	}
	if limit > 0 && rep.InputTokens == 0 {
		rep.InputTokens = Tokens(body)
	}
	id := fmt.Sprintf("chatcmpl-%d", n)
	if !wr.Stream {
		s.complete(w, id, wr.Model, rep)
		return
	}
	s.stream(w, r, id, wr.Model, rep)
}

func (s *Server) wait(r *http.Request, d time.Duration) bool { return s.fs.Wait(r, d) }

func writeError(w http.ResponseWriter, status int, msg, retryAfter, code string) {
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	typ := "server_error"
	if status < 500 {
		typ = "invalid_request_error"
	}
	var c any
	if code != "" {
		c = code
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": c}})
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

func toolCallsJSON(calls []ToolCall, withIndex bool) []map[string]any {
	out := make([]map[string]any, 0, len(calls))
	for i, tc := range calls {
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("call_%d", i+1)
		}
		args := tc.Arguments
		if args == "" {
			args = "{}"
		}
		m := map[string]any{"id": id, "type": "function", "function": map[string]any{"name": tc.Name, "arguments": args}}
		if withIndex {
			m["index"] = i
		}
		out = append(out, m)
	}
	return out
}

func (s *Server) complete(w http.ResponseWriter, id, model string, rep Reply) {
	msg := map[string]any{"role": "assistant", "content": strings.Join(chunksOf(rep), "")}
	finish := "stop"
	if len(rep.ToolCalls) > 0 {
		msg["tool_calls"] = toolCallsJSON(rep.ToolCalls, false)
		finish = "tool_calls"
	}
	if rep.FinishReason != "" {
		finish = rep.FinishReason
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": id, "object": "chat.completion", "created": time.Now().Unix(), "model": model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": rep.InputTokens, "completion_tokens": rep.OutputTokens, "total_tokens": rep.InputTokens + rep.OutputTokens},
	})
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, id, model string, rep Reply) {
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	num := func(n int) any {
		if rep.FloatNumbers {
			return json.Number(fmt.Sprintf("%d.0", n))
		}
		return n
	}
	send := func(delta map[string]any, finish any, usage any) {
		chunk := map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": model,
			"choices": []any{map[string]any{"index": num(0), "delta": delta, "finish_reason": finish}},
		}
		if usage != nil {
			chunk["choices"] = []any{}
			chunk["usage"] = usage
		}
		b, _ := json.Marshal(chunk)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if fl != nil {
			fl.Flush()
		}
	}
	send(map[string]any{"role": "assistant", "content": ""}, nil, nil)
	for i, c := range chunksOf(rep) {
		if i > 0 && !s.wait(r, rep.ChunkDelay) {
			return
		}
		if rep.CutAfter > 0 && i >= rep.CutAfter {
			cut(w)
			return
		}
		send(map[string]any{"content": c}, nil, nil)
	}
	if rep.Truncated {
		return
	}
	if rep.StreamError != "" {
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": rep.StreamError, "type": "server_error"}})
		fmt.Fprintf(w, "data: %s\n\n", b)
		return
	}
	if rep.Hang {
		select {
		case <-r.Context().Done():
		case <-s.fs.Context().Done():
		}
		return
	}
	// Tool calls are streamed the way OpenAI does: name first, arguments in two pieces.
	for i, tc := range toolCallsJSON(rep.ToolCalls, true) {
		fn := tc["function"].(map[string]any)
		args := fn["arguments"].(string)
		half := len(args) / 2
		send(map[string]any{"tool_calls": []any{map[string]any{"index": num(i), "id": tc["id"], "type": "function",
			"function": map[string]any{"name": fn["name"], "arguments": args[:half]}}}}, nil, nil)
		send(map[string]any{"tool_calls": []any{map[string]any{"index": num(i), "function": map[string]any{"arguments": args[half:]}}}}, nil, nil)
	}
	finish := "stop"
	if len(rep.ToolCalls) > 0 {
		finish = "tool_calls"
	}
	if rep.FinishReason != "" {
		finish = rep.FinishReason
	}
	send(map[string]any{}, finish, nil)
	send(nil, nil, map[string]any{"prompt_tokens": num(rep.InputTokens), "completion_tokens": num(rep.OutputTokens), "total_tokens": num(rep.InputTokens + rep.OutputTokens)})
	fmt.Fprint(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
}

// cut drops the connection mid-stream.
func cut(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			_ = c.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}
