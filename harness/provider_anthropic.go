package harness

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go"

	"gateway/internal/llm"
	"gateway/internal/media"
)

// anthropicProvider speaks the Anthropic Messages API, always streaming.
type anthropicProvider struct {
	http      *http.Client
	endpoint  string // base_url + /v1/messages
	apiKey    string
	model     string
	maxTokens int
	timeout   time.Duration
	redact    func(string) string
}

// anthropicBaseURL is the SDK's endpoint, used when base_url is not set.
const anthropicBaseURL = "https://api.anthropic.com/"

// anthropicVersion is the API version the SDK sends, and the events below are read as.
const anthropicVersion = "2023-06-01"

func newAnthropic(cfg Config, client *http.Client) *anthropicProvider {
	// The configuration is the only source of the key and URL (no ANTHROPIC_* variables,
	// no profile files).
	return &anthropicProvider{
		http:      client,
		endpoint:  endpointOf(cfg.BaseURL, anthropicBaseURL, "v1/messages"),
		apiKey:    cfg.APIKey.Reveal(),
		model:     cfg.Model,
		maxTokens: cfg.MaxTokens,
		timeout:   cfg.Timeout,
		redact:    redactor(append(URLSecrets(cfg.BaseURL), cfg.APIKey.Reveal())...),
	}
}

func (p *anthropicProvider) Name() string { return "anthropic" }

// Stream is split in small functions on purpose: the turn's goroutine waits in it for the
// model, and its stack then holds every frame below. As for OpenAI (see open there), the
// SDK builds the body, on a goroutine of its own, and the request and the event stream
// are ours: the SDK's request path kept its config and clones for the whole wait, and its
// Stream decoded each event, a union of every kind, in one deep call under the wait.
func (p *anthropicProvider) Stream(ctx context.Context, req *Request, onDelta func(string)) (*Response, error) {
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

// open posts body to v1/messages with "stream": true, as MessageService.NewStreaming does.
func (p *anthropicProvider) open(ctx context.Context, body []byte, req *Request) (*http.Response, error) {
	resp, errBody, err := postStreaming(ctx, p.http, p.endpoint, body, req, func(h http.Header) {
		h.Set("anthropic-version", anthropicVersion)
		if p.apiKey != "" {
			h.Set("X-Api-Key", p.apiKey)
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

// read gathers the streamed answer as the SDK's Stream reads the events: "ping" and
// unnamed events are skipped, an "error" event ends the stream in error.
func (p *anthropicProvider) read(ctx context.Context, raw *http.Response, onDelta func(string)) (*Response, error) {
	dec := newSSEDecoder(raw)
	defer dec.Close()
	acc := anthropicAccum{blocks: map[int64]*anthropicBlock{}}
	stopped := false
	for dec.Next() {
		ev := dec.Event()
		switch ev.Type {
		case "ping", "":
			continue
		case "error":
			return nil, p.apiError(ctx, 0, nil, ev.Data)
		case "message_stop":
			stopped = true
		}
		if len(bytes.TrimSpace(ev.Data)) == 0 {
			continue
		}
		d, err := acc.decode(ev.Data)
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
	if !stopped && acc.resp.StopReason == "" {
		return nil, p.failed(ctx, errStreamCut)
	}
	return acc.response(), nil
}

// failed classifies a call that got no answer: refused, timed out, or broken off.
func (p *anthropicProvider) failed(ctx context.Context, err error) error {
	return classify("anthropic", ctx, 0, nil, "", err, p.redact)
}

// apiError is an error the API answered ({"type": "error", "error": {"type", "message"}}),
// with the response's status, or in an "error" event of a stream (status 0), classified;
// a body that is not that shape is the message itself.
func (p *anthropicProvider) apiError(ctx context.Context, status int, h http.Header, b []byte) error {
	var body struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &body)
	msg := errorText(b, body.Error.Message)
	err := fmt.Errorf("anthropic API error: %d %s", status, http.StatusText(status))
	// An error event inside a 200 stream carries its kind only in the body.
	if status < 400 {
		err = fmt.Errorf("received error while streaming: %s", b)
		switch body.Error.Type {
		case "overloaded_error":
			status = 529
		case "rate_limit_error":
			status = http.StatusTooManyRequests
		case "authentication_error":
			status = http.StatusUnauthorized
		case "invalid_request_error":
			status = http.StatusBadRequest
		default:
			status = http.StatusInternalServerError
		}
	}
	return markOverflow(classify("anthropic", ctx, status, h, msg, err, p.redact))
}

// params is the request as the SDK takes it, on the heap rather than in Stream's frame.
func (p *anthropicProvider) params(req *Request) (*anthropic.MessageNewParams, error) {
	model := req.Model
	if model == "" {
		model = p.model
	}
	if model == "" {
		return nil, errNoModel("anthropic")
	}
	system, msgs := anthropicMessages(req.System, req.Messages)
	params := &anthropic.MessageNewParams{
		Model:     model,
		MaxTokens: int64(firstPositive(req.MaxTokens, p.maxTokens, defaultMaxTokens)),
		Messages:  msgs,
		System:    system,
	}
	if req.Temperature != nil {
		params.Temperature = anthropic.Float(*req.Temperature)
	}
	for _, t := range req.Tools {
		schema := schemaObject(t.Parameters)
		in := anthropic.ToolInputSchemaParam{Properties: schema["properties"], ExtraFields: map[string]any{}}
		if req, ok := schema["required"].([]any); ok {
			for _, r := range req {
				if s, ok := r.(string); ok {
					in.Required = append(in.Required, s)
				}
			}
		}
		for k, v := range schema {
			if k != "type" && k != "properties" && k != "required" {
				in.ExtraFields[k] = v
			}
		}
		tp := anthropic.ToolParam{Name: t.Name, InputSchema: in}
		if t.Description != "" {
			tp.Description = anthropic.String(t.Description)
		}
		params.Tools = append(params.Tools, anthropic.ToolUnionParam{OfTool: &tp})
	}
	if req.NoToolCalls && len(params.Tools) > 0 {
		none := anthropic.NewToolChoiceNoneParam()
		params.ToolChoice.OfNone = &none
	}
	cacheBreakpoints(params)
	return params, nil
}

// cacheBreakpoints marks where Anthropic's prompt cache keeps the request's beginning: the
// end of the system prompt (with the tools before it, which change only with a reload) and
// the end of the conversation. The next request of the chat, a tool step's a second later
// or the next message's, begins with the same blocks and reads them from the cache (a
// tenth of the input price, and sooner) instead of having the model read them again.
// Without a breakpoint the API caches nothing; OpenAI's cache needs none. What it costs: a
// written prefix is billed at 1.25 times the input price, and a chat quiet for over five
// minutes (the cache's life) writes its conversation again. A before_provider_payload
// hook may take the marks out.
func cacheBreakpoints(params *anthropic.MessageNewParams) {
	switch {
	case len(params.System) > 0:
		params.System[len(params.System)-1].CacheControl = anthropic.NewCacheControlEphemeralParam()
	case len(params.Tools) > 0:
		params.Tools[len(params.Tools)-1].OfTool.CacheControl = anthropic.NewCacheControlEphemeralParam()
	}
	if n := len(params.Messages); n > 0 {
		if blocks := params.Messages[n-1].Content; len(blocks) > 0 {
			if cc := blocks[len(blocks)-1].GetCacheControl(); cc != nil {
				*cc = anthropic.NewCacheControlEphemeralParam()
			}
		}
	}
}

// anthropicBlock is a content block of a streamed answer.
type anthropicBlock struct {
	tool bool
	id   string
	name string
	args strings.Builder
}

// anthropicAccum gathers a streamed answer: its text, tool calls and usage.
type anthropicAccum struct {
	text   strings.Builder
	blocks map[int64]*anthropicBlock
	order  []int64
	resp   Response
}

// An event is decoded a level at a time, for the reason the OpenAI chunk is (see
// openAIChunk): encoding/json's frames are large, and a turn waits for the model on an 8
// KB stack. Numbers are json.Number, parsed after.

// anthropicEvent is an event of the stream: its kind, and what that kind carries.
type anthropicEvent struct {
	Type         string          `json:"type"`
	Index        json.Number     `json:"index"`
	Message      json.RawMessage `json:"message"`       // message_start
	ContentBlock json.RawMessage `json:"content_block"` // content_block_start
	Delta        json.RawMessage `json:"delta"`         // content_block_delta, message_delta
	Usage        json.RawMessage `json:"usage"`         // message_delta
}

// anthropicUsage is a message's token counts.
type anthropicUsage struct {
	InputTokens  json.Number `json:"input_tokens"`
	OutputTokens json.Number `json:"output_tokens"`
	// What the prompt cache read and wrote: input_tokens counts neither.
	CacheRead    json.Number `json:"cache_read_input_tokens"`
	CacheWritten json.Number `json:"cache_creation_input_tokens"`
}

// input is the request's whole input: the conversation's size, which the context budget
// and the token metrics count, whatever part of it the cache held.
func (u *anthropicUsage) input() int {
	return number(u.InputTokens) + number(u.CacheRead) + number(u.CacheWritten)
}

// anthropicPart is a content block's start or a delta: the fields of every kind.
type anthropicPart struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	Name        string `json:"name"`
	Text        string `json:"text"`
	PartialJSON string `json:"partial_json"`
	StopReason  string `json:"stop_reason"`
}

// decode takes one event and returns its text delta.
func (a *anthropicAccum) decode(data []byte) (string, error) {
	ev := new(anthropicEvent)
	if err := json.Unmarshal(data, ev); err != nil {
		return "", err
	}
	index := int64(number(ev.Index))
	switch ev.Type {
	case "message_start":
		var m struct {
			Usage json.RawMessage `json:"usage"`
		}
		if err := json.Unmarshal(ev.Message, &m); err != nil {
			return "", err
		}
		u, err := anthropicUsageOf(m.Usage)
		if err != nil {
			return "", err
		}
		a.resp.Usage.InputTokens, a.resp.Usage.OutputTokens = u.input(), number(u.OutputTokens)
	case "content_block_start":
		cb, err := anthropicPartOf(ev.ContentBlock)
		if err != nil {
			return "", err
		}
		b := &anthropicBlock{}
		a.blocks[index] = b
		a.order = append(a.order, index)
		if cb.Type == "tool_use" {
			b.tool, b.id, b.name = true, cb.ID, cb.Name
		} else if cb.Text != "" {
			a.text.WriteString(cb.Text)
			return cb.Text, nil
		}
	case "content_block_delta":
		d, err := anthropicPartOf(ev.Delta)
		if err != nil {
			return "", err
		}
		switch d.Type {
		case "text_delta":
			a.text.WriteString(d.Text)
			return d.Text, nil
		case "input_json_delta":
			if b := a.blocks[index]; b != nil {
				b.args.WriteString(d.PartialJSON)
			}
		}
	case "message_delta":
		d, err := anthropicPartOf(ev.Delta)
		if err != nil {
			return "", err
		}
		if d.StopReason != "" {
			a.resp.StopReason = d.StopReason
		}
		u, err := anthropicUsageOf(ev.Usage)
		if err != nil {
			return "", err
		}
		if n := number(u.OutputTokens); n > 0 {
			a.resp.Usage.OutputTokens = n
		}
	}
	return "", nil
}

// anthropicPartOf decodes a content block or a delta; nothing gives a zero part.
func anthropicPartOf(raw json.RawMessage) (*anthropicPart, error) {
	p := new(anthropicPart)
	if len(raw) == 0 {
		return p, nil
	}
	return p, json.Unmarshal(raw, p)
}

// anthropicUsageOf decodes token counts; nothing gives zeros.
func anthropicUsageOf(raw json.RawMessage) (*anthropicUsage, error) {
	u := new(anthropicUsage)
	if len(raw) == 0 {
		return u, nil
	}
	return u, json.Unmarshal(raw, u)
}

// response is the answer once the stream ended: tool calls in block order.
func (a *anthropicAccum) response() *Response {
	resp := a.resp
	resp.Message = llm.Message{Role: llm.RoleAssistant, Content: a.text.String()}
	for _, i := range a.order {
		b := a.blocks[i]
		if !b.tool {
			continue
		}
		id := b.id
		if id == "" {
			id = newID()
		}
		resp.Message.ToolCalls = append(resp.Message.ToolCalls, llm.ToolCall{ID: id, Name: b.name, Arguments: argsAsSent(b.args.String())})
	}
	return &resp
}

// anthropicMessages converts the conversation: the system prompt and the system messages
// that lead the conversation go to the system field, tool results become user-side
// tool_result blocks, and consecutive messages of one role are merged (the API wants user
// and assistant to alternate, starting with the user).
//
// A system message later in the conversation (a hook's note injected at a turn) is sent
// where it stands, as a "[system note] …" text block of the user's turn there, as the
// OpenAI provider sends it (see openAIMessages). Moved to the system field, it lost its
// place, and each new note changed the beginning of every later request, while Anthropic's
// prompt cache matches a request from its start (cacheBreakpoints). The history keeps a call's results
// right after it (repair), so a note after them follows the tool_result blocks in their
// user message, where the API wants them first.
func anthropicMessages(system string, msgs []llm.Message) ([]anthropic.TextBlockParam, []anthropic.MessageParam) {
	var sys []anthropic.TextBlockParam
	if system != "" {
		sys = append(sys, anthropic.TextBlockParam{Text: system})
	}
	lead := leadingSystem(msgs)
	for _, m := range msgs[:lead] {
		if m.Content != "" {
			sys = append(sys, anthropic.TextBlockParam{Text: m.Content})
		}
	}
	msgs = msgs[lead:]
	out := make([]anthropic.MessageParam, 0, len(msgs))
	add := func(role anthropic.MessageParamRole, blocks ...anthropic.ContentBlockParamUnion) {
		if len(blocks) == 0 {
			return
		}
		if n := len(out); n > 0 && out[n-1].Role == role {
			out[n-1].Content = append(out[n-1].Content, blocks...)
			return
		}
		out = append(out, anthropic.MessageParam{Role: role, Content: blocks})
	}
	for _, m := range msgs {
		switch m.Role {
		case llm.RoleSystem:
			// A blank note says nothing: left out, answers beside it are still merged.
			if strings.TrimSpace(m.Content) != "" {
				add(anthropic.MessageParamRoleUser, anthropic.NewTextBlock(noteText(m)))
			}
		case llm.RoleUser:
			// Images first, then the text that speaks of them (Anthropic's advice).
			var blocks []anthropic.ContentBlockParamUnion
			for _, p := range m.Parts {
				if p.Type == llm.PartImage && len(p.Data) > 0 {
					blocks = append(blocks, anthropic.NewImageBlockBase64(p.MIME, base64.StdEncoding.EncodeToString(p.Data)))
				}
			}
			if len(blocks) == 0 || strings.TrimSpace(m.Content) != "" {
				blocks = append(blocks, anthropic.NewTextBlock(nonEmpty(m.Content)))
			}
			add(anthropic.MessageParamRoleUser, blocks...)
		case llm.RoleTool:
			add(anthropic.MessageParamRoleUser, anthropic.NewToolResultBlock(m.ToolCallID, nonEmpty(m.Content), m.IsError))
		case llm.RoleAssistant:
			var blocks []anthropic.ContentBlockParamUnion
			if strings.TrimSpace(m.Content) != "" { // the API refuses a blank text block
				blocks = append(blocks, anthropic.NewTextBlock(m.Content))
			}
			for _, tc := range m.ToolCalls {
				blocks = append(blocks, anthropic.NewToolUseBlock(tc.ID, argsOrEmpty(tc.Arguments), tc.Name))
			}
			add(anthropic.MessageParamRoleAssistant, blocks...)
		}
	}
	if len(out) > 0 && out[0].Role != anthropic.MessageParamRoleUser {
		out = append([]anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(omittedEarlier))}, out...)
	}
	return sys, out
}

// noteText is a system message's text as a block of the user's turn, marked as a note.
func noteText(m llm.Message) string {
	var b strings.Builder
	b.Grow(len(systemNote) + len(m.Content))
	writeTurnText(&b, m)
	return b.String()
}

func (p *anthropicProvider) imageBounds() media.Bounds { return anthropicImageBounds }

// nonEmpty stands in for empty text, which the Messages API rejects.
func nonEmpty(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(empty)"
	}
	return s
}
