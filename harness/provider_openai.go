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
	"github.com/openai/openai-go/v3/shared"

	"gateway/internal/llm"
	"gateway/internal/media"
)

// openAIProvider speaks OpenAI-compatible chat completions (OpenAI, Ollama, OpenRouter,
// Groq, vLLM, llama.cpp via base_url), always streaming.
type openAIProvider struct {
	svc       openai.ChatCompletionService
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
		svc:       openai.NewChatCompletionService(opts...),
		model:     cfg.Model,
		maxTokens: cfg.MaxTokens,
		timeout:   cfg.Timeout,
		redact:    redactor(cfg.APIKey.Reveal()),
	}
}

func (p *openAIProvider) Name() string { return "openai" }

func (p *openAIProvider) Stream(ctx context.Context, req *Request, onDelta func(string)) (*Response, error) {
	model := req.Model
	if model == "" {
		model = p.model
	}
	if model == "" {
		return nil, &ProviderError{Provider: "openai", Status: http.StatusBadRequest, Message: "no model is configured; set llm.model"}
	}
	params := openai.ChatCompletionNewParams{
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

	ctx, cancel := callContext(ctx, p.timeout)
	defer cancel()
	stream := p.svc.NewStreaming(ctx, params, option.WithMiddleware(hookMiddleware(req)))
	defer stream.Close()

	var (
		text  strings.Builder
		calls = map[int64]*llm.ToolCall{}
		args  = map[int64]*strings.Builder{}
		resp  Response
	)
	for stream.Next() {
		chunk := stream.Current()
		if chunk.Usage.PromptTokens > 0 || chunk.Usage.CompletionTokens > 0 {
			resp.Usage = llm.Usage{InputTokens: int(chunk.Usage.PromptTokens), OutputTokens: int(chunk.Usage.CompletionTokens)}
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue
			}
			if d := ch.Delta.Content; d != "" {
				text.WriteString(d)
				onDelta(d)
			}
			for _, tc := range ch.Delta.ToolCalls {
				c, ok := calls[tc.Index]
				if !ok {
					c = &llm.ToolCall{}
					calls[tc.Index] = c
					args[tc.Index] = &strings.Builder{}
				}
				if tc.ID != "" {
					c.ID = tc.ID
				}
				if tc.Function.Name != "" {
					c.Name += tc.Function.Name
				}
				args[tc.Index].WriteString(tc.Function.Arguments)
			}
			if ch.FinishReason != "" {
				resp.StopReason = ch.FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, p.classify(ctx, err)
	}
	resp.Message = llm.Message{Role: llm.RoleAssistant, Content: text.String()}
	idx := make([]int64, 0, len(calls))
	for i := range calls {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	for _, i := range idx {
		c := calls[i]
		c.Arguments = argsOrEmpty(json.RawMessage(args[i].String()))
		if c.ID == "" {
			c.ID = newID()
		}
		resp.Message.ToolCalls = append(resp.Message.ToolCalls, *c)
	}
	return &resp, nil
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
