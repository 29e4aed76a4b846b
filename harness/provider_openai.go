package harness

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"gateway/internal/llm"
	"gateway/internal/media"
)

// openAIProvider speaks OpenAI-compatible chat completions (OpenAI, Ollama, OpenRouter,
// Groq, vLLM, llama.cpp via base_url), always streaming.
type openAIProvider struct {
	http      *http.Client
	endpoint  string // base_url + /chat/completions
	apiKey    string
	model     string
	maxTokens int
	timeout   time.Duration
	redact    func(string) string
}

// openAIBaseURL is the SDK's production endpoint, used when base_url is not set.
const openAIBaseURL = "https://api.openai.com/v1/"

func newOpenAI(cfg Config, client *http.Client) *openAIProvider {
	// No ambient OPENAI_* variable is read: the configuration alone says where and how.
	return &openAIProvider{
		http:      client,
		endpoint:  endpointOf(cfg.BaseURL, openAIBaseURL, "chat/completions"),
		apiKey:    cfg.APIKey.Reveal(),
		model:     cfg.Model,
		maxTokens: cfg.MaxTokens,
		timeout:   cfg.Timeout,
		redact:    redactor(append(URLSecrets(cfg.BaseURL), cfg.APIKey.Reveal())...),
	}
}

func (p *openAIProvider) Name() string { return "openai" }

// Stream is split in small functions on purpose: the turn's goroutine waits in it for the
// model, and its stack then holds every frame below; params and chunks held by value made
// its own frame 5 KB. See open for what kept that stack at 32 KB.
func (p *openAIProvider) Stream(ctx context.Context, req *Request, onDelta func(string)) (*Response, error) {
	params, err := p.params(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := callContext(ctx, p.timeout)
	defer cancel()
	body, err := apart(params.MarshalJSON)
	if err != nil {
		return nil, p.failed(ctx, err)
	}
	raw, err := p.open(ctx, body, req)
	if err != nil {
		return nil, err
	}
	return p.read(ctx, raw, onDelta)
}

// read gathers the streamed answer; what it holds stays out of Stream's frame, which is
// under the wait for the response's headers too. It frames events as ssestream.Stream
// does ("[DONE]" ends the stream, an event with an "error" ends it in error) but without
// its frame, which held the event, the chunk and a gjson result by value: decoding a
// chunk under it took a waiting turn's stack past 8 KB, and every turn's stack doubled
// when the model answered them all at once.
func (p *openAIProvider) read(ctx context.Context, raw *http.Response, onDelta func(string)) (*Response, error) {
	dec := newSSEDecoder(raw)
	defer dec.Close()
	var acc openAIAccum
	done := false
	for dec.Next() {
		data := dec.Event().Data
		if bytes.HasPrefix(data, sseDone) {
			done = true
			break
		}
		d, err := acc.decode(data)
		if err != nil {
			return nil, p.failed(ctx, err)
		}
		if d != "" {
			onDelta(d)
		}
	}
	if err := dec.Err(); err != nil {
		return nil, p.failed(ctx, err)
	}
	if !done && acc.resp.StopReason == "" {
		return nil, p.failed(ctx, errStreamCut)
	}
	return acc.response(), nil
}

// sseDone is the data of the stream's last event.
var sseDone = []byte("[DONE]")

// params is the request as the SDK takes it, on the heap rather than in Stream's frame.
func (p *openAIProvider) params(req *Request) (*openai.ChatCompletionNewParams, error) {
	model := req.Model
	if model == "" {
		model = p.model
	}
	if model == "" {
		return nil, errNoModel("openai")
	}
	params := &openai.ChatCompletionNewParams{
		Model:         shared.ChatModel(model),
		Messages:      openAIMessages(req.System, req.Messages),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	if n := firstPositive(req.MaxTokens, p.maxTokens); n > 0 {
		params.MaxTokens = openai.Int(int64(n))
	}
	if req.Temperature != nil {
		params.Temperature = openai.Float(*req.Temperature)
	}
	for _, t := range req.Tools {
		fd := shared.FunctionDefinitionParam{Name: t.Name, Parameters: shared.FunctionParameters(schemaObject(t.Parameters))}
		if t.Description != "" {
			fd.Description = openai.String(t.Description)
		}
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(fd))
	}
	if req.NoToolCalls && len(params.Tools) > 0 {
		params.ToolChoice.OfAuto = openai.String(string(openai.ChatCompletionToolChoiceOptionAutoNone))
	}
	return params, nil
}

// open posts body to chat/completions with "stream": true, as ChatCompletionService.NewStreaming
// does, on a request of its own; read then takes the event stream apart.
// The SDK's request path kept about 8 KB a call alive for as long as the turn waited for
// the model (its request config, a clone of the request, its headers): with 100 turns
// waiting, close to 1 MiB of private memory (docs/bench.md, "sixth pass"). The SDK still
// builds the body; what it added on the way (telemetry headers, its retries, which are
// off here) is not needed.
//
// Three choices keep the turn's goroutine on a small stack for its whole wait for the
// model. The SDK's encoding of params (copied by value through several frames, then
// reflected on field by field) runs on a goroutine that ends with it (Stream); the body
// sent is those bytes, as before_provider_payload sees them. Chunks decode into
// openAIChunk, the fields the answer uses, with encoding/json, rather than into
// ChatCompletionChunk, whose decoder recursed as deep. Each had grown that stack to
// 32 KB, kept for as long as the turn then waited (the model, then Telegram's pacing).
// Stream, open and the harness's frames above them are kept small for the same reason
// (the wait for the headers is the deepest: see TestWaitingTurnHoldsASmallStack).
func (p *openAIProvider) open(ctx context.Context, body []byte, req *Request) (*http.Response, error) {
	resp, errBody, err := postStreaming(ctx, p.http, p.endpoint, body, req, func(h http.Header) {
		if p.apiKey != "" {
			h.Set("Authorization", "Bearer "+p.apiKey)
		}
	})
	if err != nil {
		return nil, p.failed(ctx, err)
	}
	if resp.StatusCode >= 400 {
		return nil, p.apiError(ctx, resp.StatusCode, resp.Header, errBody)
	}
	return resp, nil
}

// failed classifies a call that got no answer: refused, timed out, or broken off.
func (p *openAIProvider) failed(ctx context.Context, err error) error {
	return classify("openai", ctx, 0, nil, "", err, p.redact)
}

// apiError is an error response as the SDK reads it ({"error": {"message", "type",
// "code"}}), classified; a body that is not that shape is the message itself.
func (p *openAIProvider) apiError(ctx context.Context, status int, h http.Header, b []byte) error {
	var e struct {
		Error struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"` // a string at OpenAI, a number at some servers
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	msg := errorText(b, e.Error.Message)
	code := strings.Trim(string(e.Error.Code), `"`)
	err := fmt.Errorf("OpenAI API error: %d %s", status, http.StatusText(status))
	if code == "insufficient_quota" || e.Error.Type == "insufficient_quota" {
		// A 429 that no wait mends: not retried, and not told as a busy model.
		return &ProviderError{Provider: "openai", Status: status, Quota: true, Message: p.redact(clip(msg, 300)), Err: redactedError{err, p.redact}}
	}
	return markOverflow(classify("openai", ctx, status, h, msg, err, p.redact), code, e.Error.Type)
}

// A streamed chat.completion.chunk is decoded a level at a time: the chunk, then each
// choice, then its delta, each with a json.Unmarshal of its own. encoding/json's frames
// are large (an object's is 0.9 KB, a string's 1 KB); decoded in one call, the chunk's
// nesting put a text delta 5 KB under read, and the turn's stack, which waits on 8 KB
// (see open), doubled at the first chunk, to stay so while the answer then waited for its
// send. A level at a time, a text chunk is decoded within 4 KB of stack
// (TestChunkDecodingFitsAWaitingTurnsStack).

// openAIChunk is the part of a streamed chunk the answer is made of.
type openAIChunk struct {
	Choices []json.RawMessage `json:"choices"`
	Usage   struct {
		PromptTokens     json.Number `json:"prompt_tokens"` // some compatible servers send 3.0
		CompletionTokens json.Number `json:"completion_tokens"`
	} `json:"usage"`
	// Error is set by a server that fails mid-stream (an event {"error": {...}}).
	Error json.RawMessage `json:"error"`
}

// openAIChoice is one choice of a chunk.
type openAIChoice struct {
	Index        json.Number     `json:"index"`
	Delta        json.RawMessage `json:"delta"`
	FinishReason string          `json:"finish_reason"`
}

// openAIDelta is what a choice adds to the answer.
type openAIDelta struct {
	Content   string `json:"content"`
	ToolCalls []struct {
		Index    json.Number `json:"index"`
		ID       string      `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// openAIAccum gathers a streamed answer: its text, tool calls and usage.
type openAIAccum struct {
	text  strings.Builder
	calls map[int64]*llm.ToolCall
	args  map[int64]*strings.Builder
	resp  Response
}

// decode takes one event's chunk and returns its text delta.
func (a *openAIAccum) decode(data []byte) (string, error) {
	chunk := new(openAIChunk)
	if err := json.Unmarshal(data, chunk); err != nil {
		return "", err
	}
	if chunk.Error != nil {
		return "", fmt.Errorf("received error while streaming: %s", chunk.Error)
	}
	if in, out := number(chunk.Usage.PromptTokens), number(chunk.Usage.CompletionTokens); in > 0 || out > 0 {
		a.resp.Usage = llm.Usage{InputTokens: in, OutputTokens: out}
	}
	var delta string
	for _, raw := range chunk.Choices {
		d, err := a.choice(raw)
		if err != nil {
			return "", err
		}
		delta += d
	}
	return delta, nil
}

// choice takes one choice of a chunk and returns its text delta; only the first choice
// (index 0) is the answer.
func (a *openAIAccum) choice(raw json.RawMessage) (string, error) {
	ch := new(openAIChoice)
	if err := json.Unmarshal(raw, ch); err != nil {
		return "", err
	}
	if number(ch.Index) != 0 {
		return "", nil
	}
	if ch.FinishReason != "" {
		a.resp.StopReason = ch.FinishReason
	}
	if len(ch.Delta) == 0 {
		return "", nil
	}
	d := new(openAIDelta)
	if err := json.Unmarshal(ch.Delta, d); err != nil {
		return "", err
	}
	a.text.WriteString(d.Content)
	for _, tc := range d.ToolCalls {
		i := int64(number(tc.Index))
		c, ok := a.calls[i]
		if !ok {
			if a.calls == nil {
				a.calls, a.args = map[int64]*llm.ToolCall{}, map[int64]*strings.Builder{}
			}
			c = &llm.ToolCall{}
			a.calls[i] = c
			a.args[i] = &strings.Builder{}
		}
		if tc.ID != "" {
			c.ID = tc.ID
		}
		if tc.Function.Name != "" {
			c.Name += tc.Function.Name
		}
		a.args[i].WriteString(tc.Function.Arguments)
	}
	return d.Content, nil
}

// number is n as an int (3 and 3.0 alike); 0 when absent or not a number. Numbers are
// decoded as json.Number and parsed here: strconv's float parsing under encoding/json's
// frames was the deepest point of a chunk's decoding.
func number(n json.Number) int {
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return 0
	}
	return int(f)
}

// response is the answer once the stream ended: tool calls in index order.
func (a *openAIAccum) response() *Response {
	resp := a.resp
	resp.Message = llm.Message{Role: llm.RoleAssistant, Content: a.text.String()}
	idx := make([]int64, 0, len(a.calls))
	for i := range a.calls {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(x, y int) bool { return idx[x] < idx[y] })
	for _, i := range idx {
		c := a.calls[i]
		c.Arguments = argsAsSent(a.args[i].String())
		if c.ID == "" {
			c.ID = newID()
		}
		resp.Message.ToolCalls = append(resp.Message.ToolCalls, *c)
	}
	return &resp
}

// openAIMessages converts the conversation into the form the strictest chat templates of
// models served by vLLM or llama.cpp (Mistral, Gemma) take: one system message, first; then
// user and assistant turns that alternate, starting with the user. OpenAI itself takes any
// order, but those templates refuse the request, and the chat got an error, not an answer.
//
//   - System messages before the conversation (a context hook's) join the system prompt.
//     One later in it (a hook's note injected at a turn) becomes, where it stands, a user
//     message "[system note] …", merged with the user message beside it: the model still
//     reads it at the point it was about, and the request's beginning stays what it was
//     before the note, so the server's prompt cache still holds for it. Added to the system
//     prompt instead, each new note would change the first tokens of every request after it.
//   - Consecutive user messages (a compaction's summary and the message after it, a prompt
//     that got no answer and the next one) are sent as one, texts joined by a blank line.
//   - Consecutive assistant messages (one a context hook left beside another) are sent as
//     one; only the last of them may carry tool calls, which keeps them followed by their
//     results. An assistant message with tool calls is never merged with a later one.
//   - A conversation that begins with the model's answer (after a cut or a context hook
//     that kept only the newest messages) gets a short user message before it.
//
// A conversation already in that form is converted message by message, with no copy.
func openAIMessages(system string, msgs []llm.Message) []openai.ChatCompletionMessageParamUnion {
	if lead := leadingSystem(msgs); lead > 0 {
		system = joinSystem(system, msgs[:lead])
		msgs = msgs[lead:]
	}
	out := make([]openai.ChatCompletionMessageParamUnion, 0, len(msgs)+2)
	if system != "" {
		out = append(out, openai.SystemMessage(system))
	}
	if len(msgs) > 0 && msgs[0].Role == llm.RoleAssistant {
		out = append(out, openai.UserMessage(omittedEarlier))
	}
	for i := 0; i < len(msgs); {
		j := i + 1
		switch msgs[i].Role {
		case llm.RoleUser, llm.RoleSystem:
			for j < len(msgs) && (msgs[j].Role == llm.RoleUser || msgs[j].Role == llm.RoleSystem) {
				j++
			}
			if m, ok := openAIUser(msgs[i:j]); ok {
				out = append(out, m)
			}
		case llm.RoleAssistant:
			// A blank system message between two answers says nothing: pass over it, so
			// that the two are still sent as one.
			last := i
			for k := i + 1; k < len(msgs) && len(msgs[last].ToolCalls) == 0; k++ {
				if msgs[k].Role == llm.RoleAssistant {
					last = k
				} else if msgs[k].Role != llm.RoleSystem || strings.TrimSpace(msgs[k].Content) != "" {
					break
				}
			}
			j = last + 1
			out = append(out, openAIAssistant(msgs[i:j]))
		case llm.RoleTool:
			out = append(out, openai.ToolMessage(msgs[i].Content, msgs[i].ToolCallID))
		}
		i = j
	}
	return out
}

// joinSystem is the system prompt followed by the system messages that lead the
// conversation, joined by blank lines.
func joinSystem(system string, lead []llm.Message) string {
	var b strings.Builder
	b.WriteString(system)
	for _, m := range lead {
		if strings.TrimSpace(m.Content) == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(m.Content)
	}
	return b.String()
}

// openAIAssistant is one assistant message made of consecutive ones, the last of them an
// assistant's (blank system messages among them are left out): their texts joined by a
// blank line, and the tool calls of the last.
func openAIAssistant(msgs []llm.Message) openai.ChatCompletionMessageParamUnion {
	m := msgs[len(msgs)-1]
	content := m.Content
	if len(msgs) > 1 {
		var b strings.Builder
		for _, a := range msgs {
			if a.Role != llm.RoleAssistant || strings.TrimSpace(a.Content) == "" {
				continue
			}
			if b.Len() > 0 {
				b.WriteString("\n\n")
			}
			b.WriteString(a.Content)
		}
		content = b.String()
	}
	var a openai.ChatCompletionAssistantMessageParam
	if content != "" || len(m.ToolCalls) == 0 {
		a.Content.OfString = openai.String(content)
	}
	for _, tc := range m.ToolCalls {
		a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
			OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
				ID: tc.ID,
				Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{
					Name:      tc.Name,
					Arguments: string(argsOrEmpty(tc.Arguments)),
				},
			},
		})
	}
	return openai.ChatCompletionMessageParamUnion{OfAssistant: &a}
}

// openAIUser is one user message made of consecutive user and system messages: each
// one's text (a system message's marked as a note), then its images as data URLs in high
// detail (they were scaled to what high detail uses). Texts that meet are joined with a
// blank line. ok is false for blank system messages alone: there is nothing to send.
func openAIUser(msgs []llm.Message) (m openai.ChatCompletionMessageParamUnion, ok bool) {
	if len(msgs) == 1 && msgs[0].Role == llm.RoleUser && !slices.ContainsFunc(msgs[0].Parts, sentImage) {
		return openai.UserMessage(msgs[0].Content), true // the usual message: its text as it is
	}
	var (
		content []openai.ChatCompletionContentPartUnionParam
		text    strings.Builder // text not yet put in content
		images  bool
		user    bool
	)
	flush := func() {
		if text.Len() > 0 {
			content = append(content, openai.TextContentPart(text.String()))
			text.Reset()
		}
	}
	for _, m := range msgs {
		user = user || m.Role == llm.RoleUser
		writeTurnText(&text, m)
		for _, p := range m.Parts {
			if sentImage(p) {
				flush()
				images = true
				content = append(content, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{
					URL:    "data:" + p.MIME + ";base64," + base64.StdEncoding.EncodeToString(p.Data),
					Detail: "high",
				}))
			}
		}
	}
	if !images {
		return openai.UserMessage(text.String()), user || text.Len() > 0
	}
	flush()
	return openai.UserMessage(content), true
}

// sentImage reports whether p goes to the model as an image.
func sentImage(p llm.Part) bool { return p.Type == llm.PartImage && len(p.Data) > 0 }

func (p *openAIProvider) imageBounds() media.Bounds { return openAIImageBounds }

func firstPositive(vs ...int) int {
	for _, v := range vs {
		if v > 0 {
			return v
		}
	}
	return 0
}
