package harness

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/anthropics/anthropic-sdk-go/packages/ssestream"

	"gateway/internal/llm"
	"gateway/internal/media"
)

// anthropicProvider speaks the Anthropic Messages API, always streaming.
type anthropicProvider struct {
	msgs      anthropic.MessageService
	model     string
	maxTokens int
	timeout   time.Duration
	redact    func(string) string
}

func newAnthropic(cfg Config, client *http.Client) *anthropicProvider {
	// WithoutEnvironmentDefaults: the configuration is the only source of the key and URL
	// (no ANTHROPIC_* variables, no profile files). Retries are ours.
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithHTTPClient(client),
		option.WithMaxRetries(0),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.APIKey.IsSet() {
		opts = append(opts, option.WithAPIKey(cfg.APIKey.Reveal()))
	}
	c := anthropic.NewClient(opts...)
	return &anthropicProvider{
		msgs:      c.Messages,
		model:     cfg.Model,
		maxTokens: cfg.MaxTokens,
		timeout:   cfg.Timeout,
		redact:    redactor(cfg.APIKey.Reveal()),
	}
}

func (p *anthropicProvider) Name() string { return "anthropic" }

// Stream is split in small functions on purpose: the turn's goroutine waits in it for the
// model, and its stack then holds every frame below. Params and events held by value made
// its own frame 12 KB.
func (p *anthropicProvider) Stream(ctx context.Context, req *Request, onDelta func(string)) (*Response, error) {
	params, err := p.params(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := callContext(ctx, p.timeout)
	defer cancel()
	stream := p.open(ctx, params, req)
	defer stream.Close()

	acc := anthropicAccum{blocks: map[int64]*anthropicBlock{}}
	for stream.Next() {
		if d := acc.add(stream); d != "" {
			onDelta(d)
		}
	}
	if err := stream.Err(); err != nil {
		return nil, p.classify(ctx, err)
	}
	return acc.response(), nil
}

// params is the request as the SDK takes it, on the heap rather than in Stream's frame.
func (p *anthropicProvider) params(req *Request) (*anthropic.MessageNewParams, error) {
	model := req.Model
	if model == "" {
		model = p.model
	}
	if model == "" {
		return nil, &ProviderError{Provider: "anthropic", Status: http.StatusBadRequest, Message: "no model is configured; set llm.model"}
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
	return params, nil
}

// open sends the request; the SDK takes params by value, and the copy lives in this frame.
func (p *anthropicProvider) open(ctx context.Context, params *anthropic.MessageNewParams, req *Request) *ssestream.Stream[anthropic.MessageStreamEventUnion] {
	return p.msgs.NewStreaming(ctx, *params, option.WithMiddleware(hookMiddleware(req)))
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

// add takes the stream's current event and returns its text delta. The event is copied
// here, in a frame that is gone while the stream waits for the next one.
func (a *anthropicAccum) add(stream *ssestream.Stream[anthropic.MessageStreamEventUnion]) string {
	ev := stream.Current()
	switch ev.Type {
	case "message_start":
		a.resp.Usage.InputTokens = int(ev.Message.Usage.InputTokens)
		a.resp.Usage.OutputTokens = int(ev.Message.Usage.OutputTokens)
	case "content_block_start":
		b := &anthropicBlock{}
		a.blocks[ev.Index] = b
		a.order = append(a.order, ev.Index)
		if ev.ContentBlock.Type == "tool_use" {
			b.tool, b.id, b.name = true, ev.ContentBlock.ID, ev.ContentBlock.Name
		} else if ev.ContentBlock.Text != "" {
			a.text.WriteString(ev.ContentBlock.Text)
			return ev.ContentBlock.Text
		}
	case "content_block_delta":
		switch ev.Delta.Type {
		case "text_delta":
			if ev.Delta.Text != "" {
				a.text.WriteString(ev.Delta.Text)
				return ev.Delta.Text
			}
		case "input_json_delta":
			if b := a.blocks[ev.Index]; b != nil {
				b.args.WriteString(ev.Delta.PartialJSON)
			}
		}
	case "message_delta":
		if ev.Delta.StopReason != "" {
			a.resp.StopReason = string(ev.Delta.StopReason)
		}
		if ev.Usage.OutputTokens > 0 {
			a.resp.Usage.OutputTokens = int(ev.Usage.OutputTokens)
		}
	}
	return ""
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
		resp.Message.ToolCalls = append(resp.Message.ToolCalls, llm.ToolCall{ID: id, Name: b.name, Arguments: argsOrEmpty(json.RawMessage(b.args.String()))})
	}
	return &resp
}

func (p *anthropicProvider) classify(ctx context.Context, err error) error {
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) {
		return classify("anthropic", ctx, 0, nil, "", err, p.redact)
	}
	var body struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(apiErr.RawJSON()), &body)
	status := apiErr.StatusCode
	var h http.Header
	if apiErr.Response != nil {
		h = apiErr.Response.Header
		if status == 0 {
			status = apiErr.Response.StatusCode
		}
	}
	// An error event inside a 200 stream carries its kind only in the body.
	if status < 400 {
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
	return markOverflow(classify("anthropic", ctx, status, h, body.Error.Message, err, p.redact))
}

// anthropicMessages converts the conversation: system text goes to the system field, tool
// results become user-side tool_result blocks, and consecutive messages of one role are
// merged (the API wants user and assistant to alternate, starting with the user).
func anthropicMessages(system string, msgs []llm.Message) ([]anthropic.TextBlockParam, []anthropic.MessageParam) {
	var sys []anthropic.TextBlockParam
	if system != "" {
		sys = append(sys, anthropic.TextBlockParam{Text: system})
	}
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
			if m.Content != "" {
				sys = append(sys, anthropic.TextBlockParam{Text: m.Content})
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
			if m.Content != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Content))
			}
			for _, tc := range m.ToolCalls {
				blocks = append(blocks, anthropic.NewToolUseBlock(tc.ID, argsOrEmpty(tc.Arguments), tc.Name))
			}
			add(anthropic.MessageParamRoleAssistant, blocks...)
		}
	}
	if len(out) > 0 && out[0].Role != anthropic.MessageParamRoleUser {
		out = append([]anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("(earlier conversation omitted)"))}, out...)
	}
	return sys, out
}

func (p *anthropicProvider) imageBounds() media.Bounds { return anthropicImageBounds }

// nonEmpty stands in for empty text, which the Messages API rejects.
func nonEmpty(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(empty)"
	}
	return s
}
