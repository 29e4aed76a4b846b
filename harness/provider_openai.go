package harness

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"

	"gateway/internal/llm"
	"gateway/internal/media"
)

// openAIProvider speaks OpenAI-compatible chat completions (OpenAI, Ollama, OpenRouter,
// Groq, vLLM, llama.cpp via base_url), always streaming.
type openAIProvider struct {
	// client sends the chat completions (open) with the options a ChatCompletionService
	// built from ours has; made without openai.NewClient, it reads no environment.
	client    *openai.Client
	model     string
	maxTokens int
	timeout   time.Duration
	redact    func(string) string
}

func newOpenAI(cfg Config, client *http.Client) *openAIProvider {
	// The service is built without openai.NewClient so that ambient OPENAI_* variables
	// never override the configuration; retries are ours (they honour Retry-After and
	// report progress to the chat).
	opts := []option.RequestOption{
		option.WithEnvironmentProduction(),
		option.WithHTTPClient(client),
		option.WithMaxRetries(0),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.APIKey.IsSet() {
		opts = append(opts, option.WithAPIKey(cfg.APIKey.Reveal()))
	}
	return &openAIProvider{
		client:    &openai.Client{Options: openai.NewChatCompletionService(opts...).Options},
		model:     cfg.Model,
		maxTokens: cfg.MaxTokens,
		timeout:   cfg.Timeout,
		redact:    redactor(cfg.APIKey.Reveal()),
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
	body, err := encodeApart(func() ([]byte, error) { return params.MarshalJSON() })
	if err != nil {
		return nil, p.classify(ctx, err)
	}
	raw, err := p.open(ctx, body, req)
	return p.read(ctx, raw, err, onDelta)
}

// read gathers the streamed answer; what it holds stays out of Stream's frame, which is
// under the wait for the response's headers too.
func (p *openAIProvider) read(ctx context.Context, raw *http.Response, err error, onDelta func(string)) (*Response, error) {
	stream := ssestream.NewStream[openAIChunk](newSSEDecoder(raw), err)
	defer stream.Close()
	var acc openAIAccum
	for stream.Next() {
		chunk := stream.Current()
		if d := acc.add(&chunk); d != "" {
			onDelta(d)
		}
	}
	if err := stream.Err(); err != nil {
		return nil, p.classify(ctx, err)
	}
	return acc.response(), nil
}

// params is the request as the SDK takes it, on the heap rather than in Stream's frame.
func (p *openAIProvider) params(req *Request) (*openai.ChatCompletionNewParams, error) {
	model := req.Model
	if model == "" {
		model = p.model
	}
	if model == "" {
		return nil, &ProviderError{Provider: "openai", Status: http.StatusBadRequest, Message: "no model is configured; set llm.model"}
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
	return params, nil
}

// open sends body as ChatCompletionService.NewStreaming does (POST chat/completions
// with "stream": true); read then frames the SSE body with the SDK's ssestream. Two
// changes keep the turn's goroutine on a small stack for its whole wait for the model.
// The SDK's encoding of params (copied by value through several frames, then reflected
// on field by field) runs on a goroutine that ends with it (Stream); the body sent is the
// same bytes, as before_provider_payload sees them. And chunks decode into openAIChunk,
// the fields the answer uses, with encoding/json, rather than into ChatCompletionChunk,
// whose decoder recursed as deep. Each had grown that stack to 32 KB, kept for as long as
// the turn then waited (the model, then Telegram's pacing). Stream, open and the
// harness's frames above them are kept small for the same reason (the wait for the
// headers is the deepest: see TestWaitingTurnHoldsASmallStack).
func (p *openAIProvider) open(ctx context.Context, body []byte, req *Request) (raw *http.Response, err error) {
	err = p.client.Post(ctx, "chat/completions", body, &raw,
		option.WithMiddleware(hookMiddleware(req)), option.WithJSONSet("stream", true))
	return raw, err
}

// openAIChunk is the part of a streamed chat.completion.chunk the answer is made of.
type openAIChunk struct {
	Choices []struct {
		Index float64 `json:"index"` // numbers as float64: some compatible servers send 0.0
		Delta struct {
			Content   string `json:"content"`
			ToolCalls []struct {
				Index    float64 `json:"index"`
				ID       string  `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     float64 `json:"prompt_tokens"`
		CompletionTokens float64 `json:"completion_tokens"`
	} `json:"usage"`
}

// openAIAccum gathers a streamed answer: its text, tool calls and usage.
type openAIAccum struct {
	text  strings.Builder
	calls map[int64]*llm.ToolCall
	args  map[int64]*strings.Builder
	resp  Response
}

// add takes the stream's current chunk and returns its text delta.
func (a *openAIAccum) add(chunk *openAIChunk) string {
	if chunk.Usage.PromptTokens > 0 || chunk.Usage.CompletionTokens > 0 {
		a.resp.Usage = llm.Usage{InputTokens: int(chunk.Usage.PromptTokens), OutputTokens: int(chunk.Usage.CompletionTokens)}
	}
	var delta string
	for _, ch := range chunk.Choices {
		if ch.Index != 0 {
			continue
		}
		if d := ch.Delta.Content; d != "" {
			a.text.WriteString(d)
			delta += d
		}
		for _, tc := range ch.Delta.ToolCalls {
			i := int64(tc.Index)
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
		if ch.FinishReason != "" {
			a.resp.StopReason = ch.FinishReason
		}
	}
	return delta
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
		c.Arguments = argsOrEmpty(json.RawMessage(a.args[i].String()))
		if c.ID == "" {
			c.ID = newID()
		}
		resp.Message.ToolCalls = append(resp.Message.ToolCalls, *c)
	}
	return &resp
}

func (p *openAIProvider) classify(ctx context.Context, err error) error {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		var h http.Header
		if apiErr.Response != nil {
			h = apiErr.Response.Header
		}
		return markOverflow(classify("openai", ctx, apiErr.StatusCode, h, apiErr.Message, err, p.redact), apiErr.Code, apiErr.Type)
	}
	return classify("openai", ctx, 0, nil, "", err, p.redact)
}

// openAIMessages converts the conversation; the system prompt goes first.
func openAIMessages(system string, msgs []llm.Message) []openai.ChatCompletionMessageParamUnion {
	out := make([]openai.ChatCompletionMessageParamUnion, 0, len(msgs)+1)
	if system != "" {
		out = append(out, openai.SystemMessage(system))
	}
	for _, m := range msgs {
		switch m.Role {
		case llm.RoleSystem:
			out = append(out, openai.SystemMessage(m.Content))
		case llm.RoleUser:
			out = append(out, openAIUser(m))
		case llm.RoleTool:
			out = append(out, openai.ToolMessage(m.Content, m.ToolCallID))
		case llm.RoleAssistant:
			var a openai.ChatCompletionAssistantMessageParam
			if m.Content != "" || len(m.ToolCalls) == 0 {
				a.Content.OfString = openai.String(m.Content)
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
			out = append(out, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		}
	}
	return out
}

// openAIUser is a user message: its text, then its images as data URLs in high detail
// (they were scaled to what high detail uses).
func openAIUser(m llm.Message) openai.ChatCompletionMessageParamUnion {
	var images []openai.ChatCompletionContentPartUnionParam
	for _, p := range m.Parts {
		if p.Type == llm.PartImage && len(p.Data) > 0 {
			images = append(images, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{
				URL:    "data:" + p.MIME + ";base64," + base64.StdEncoding.EncodeToString(p.Data),
				Detail: "high",
			}))
		}
	}
	if len(images) == 0 {
		return openai.UserMessage(m.Content)
	}
	content := make([]openai.ChatCompletionContentPartUnionParam, 0, len(images)+1)
	if strings.TrimSpace(m.Content) != "" {
		content = append(content, openai.TextContentPart(m.Content))
	}
	return openai.UserMessage(append(content, images...))
}

func (p *openAIProvider) imageBounds() media.Bounds { return openAIImageBounds }

func firstPositive(vs ...int) int {
	for _, v := range vs {
		if v > 0 {
			return v
		}
	}
	return 0
}
