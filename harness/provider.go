package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"gateway/internal/llm"
)

// Defaults for provider calls.
const (
	defaultTimeout   = 120 * time.Second
	defaultMaxTokens = 4096
	// maxPayload bounds a request body a before_provider_payload hook may hand back.
	maxPayload = 32 << 20
)

func newProvider(cfg Config, client *http.Client) (Provider, error) {
	if client == nil {
		// Calls are bounded by their context (Config.Timeout), not by the client, so that a
		// long streamed answer is not cut off by a whole-request timeout.
		client = &http.Client{}
	}
	switch strings.ToLower(strings.TrimSpace(cfg.Provider)) {
	case "", "echo":
		return NewEcho(), nil
	case "fake":
		// Built from config, its request log could never be read: it would only hold the
		// messages of the latest 1024 calls in memory.
		f := &Fake{noLog: true}
		f.SetFunc(func(req *Request) FakeReply { return FakeReply{Text: lastUserText(req.Messages)} })
		return f, nil
	case "openai":
		return newOpenAI(cfg.WithDefaults(), client), nil
	case "anthropic":
		return newAnthropic(cfg.WithDefaults(), client), nil
	default:
		return nil, fmt.Errorf("llm.provider: unknown provider %q (known: openai, anthropic, echo, fake)", cfg.Provider)
	}
}

// postStreaming posts body with "stream": true, as both SDKs' NewStreaming do: the SDK
// builds the body, the request is ours (see openAIProvider.open for why).
// before_provider_payload sees and may replace the exact body; after_provider_response is
// told the status and headers. An error status comes back with its body (bounded), for
// the provider to read; the response's body is then closed.
func postStreaming(ctx context.Context, client *http.Client, endpoint string, body []byte, req *Request, auth func(http.Header)) (*http.Response, []byte, error) {
	// Where the SDKs' WithJSONSet("stream", true) put it, at the end.
	body = append(body[:len(body)-1:len(body)-1], `,"stream":true}`...)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(req.payload(body)))
	if err != nil {
		return nil, nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "application/json")
	auth(hr.Header)
	resp, err := client.Do(hr)
	if err != nil {
		return nil, nil, err
	}
	if req.OnResponse != nil {
		req.OnResponse(resp.StatusCode, resp.Header)
	}
	if resp.StatusCode < 400 {
		resp.Body = touching(ctx, resp.Body)
		return resp, nil, nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_ = resp.Body.Close()
	return resp, b, nil
}

// endpointOf is path under base_url, or under def when base_url is not set.
func endpointOf(base, def, path string) string {
	if base == "" {
		base = def
	}
	if u, err := url.Parse(base); err == nil {
		return u.JoinPath(path).String()
	}
	return strings.TrimRight(base, "/") + "/" + path // the request reports the bad URL
}

// errorText is what an error response says: message, read from the body, or else the
// body itself (a proxy's page).
func errorText(body []byte, message string) string {
	if message != "" {
		return message
	}
	return strings.TrimSpace(string(body))
}

// maxErrorBody bounds what is read of an error response.
const maxErrorBody = 64 << 10

// payload is body as before_provider_payload hands it back: a reply that is empty, too
// large or not JSON leaves body as it was.
func (r *Request) payload(body []byte) []byte {
	if r.Payload == nil {
		return body
	}
	if out := r.Payload(body); len(out) > 0 && len(out) <= maxPayload && json.Valid(out) {
		return out
	}
	return body
}

// apart runs fn on a goroutine of its own and waits for it. Encoding a request or reading
// a history back takes far more stack than waiting does; the stack of a goroutine only
// shrinks when it uses a quarter of it, so the goroutine that then waits (a turn for its
// model, a chat's actor for its next message) keeps a small one.
func apart[T any](fn func() (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		v, err = fn()
	}()
	<-done
	return v, err
}

// callContext bounds a provider call by the configured timeout unless the caller already did.
func callContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	return context.WithTimeout(ctx, timeout)
}

// lastUserText is the content of the latest user message.
func lastUserText(msgs []llm.Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == llm.RoleUser {
			return msgs[i].Content
		}
	}
	return ""
}

// schemaObject decodes a tool's JSON Schema into a map, defaulting to an empty object schema.
func schemaObject(raw json.RawMessage) map[string]any {
	m := map[string]any{}
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &m)
	}
	if _, ok := m["type"]; !ok {
		m["type"] = "object"
	}
	if _, ok := m["properties"]; !ok {
		m["properties"] = map[string]any{}
	}
	return m
}

// argsAsSent are a streamed tool call's arguments as the model sent them, {} when it sent
// none. Text that is not JSON is kept: the run tells the model so rather than call the tool
// with {} (see badArguments); the history gets {} in its place (cleanToolCalls).
func argsAsSent(s string) json.RawMessage {
	if strings.TrimSpace(s) == "" {
		return json.RawMessage("{}")
	}
	return json.RawMessage(s)
}

// argsOrEmpty keeps tool-call arguments valid JSON for APIs that require an object.
func argsOrEmpty(a json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(a)) == 0 || !json.Valid(a) {
		return json.RawMessage("{}")
	}
	return a
}

// omittedEarlier stands before a conversation that begins with the model's answer (both
// providers' APIs or templates want the user first).
const omittedEarlier = "(earlier conversation omitted)"

// systemNote marks a system message sent as part of a user message.
const systemNote = "[system note] "

// leadingSystem is how many system messages lead msgs (a context hook's, before the
// conversation): both providers put them in the system prompt. A system message after them
// is a note sent where it stands, in the user's turn (see openAIMessages for why).
func leadingSystem(msgs []llm.Message) int {
	n := 0
	for n < len(msgs) && msgs[n].Role == llm.RoleSystem {
		n++
	}
	return n
}

// writeTurnText adds m's text to b, which gathers one user turn of several messages: after
// a blank line when b holds text already, and marked as a note when m is a system message.
// Blank text adds nothing.
func writeTurnText(b *strings.Builder, m llm.Message) {
	if strings.TrimSpace(m.Content) == "" {
		return
	}
	if b.Len() > 0 {
		b.WriteString("\n\n")
	}
	if m.Role == llm.RoleSystem {
		b.WriteString(systemNote)
	}
	b.WriteString(m.Content)
}
