package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"gateway/channels/channeltest"
	"gateway/harness/openaitest"
	"gateway/hooks"
)

// A model API that refuses the gateway's key (401) told the chat "Check llm.api_key": words
// for the admin, which a chat user can do nothing with. The chat is now told plainly that
// the model cannot be reached and the admin knows; the log and the gateway:error event (the
// admin's) name llm.api_key. The same for the other failures only the admin can mend.
func TestModelRefusingTheKeyIsToldPlainlyInTheChatAndByKeyInTheLog(t *testing.T) {
	srv, opt := withOpenAIFake(t, 0)
	var logs channeltest.LogBuffer
	e := newEnv(t, opt, func(_ *Config, _ *Runtime, d *Deps) { d.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	var mu sync.Mutex
	var events []string
	e.bus.Observe("test", func(_ context.Context, ev hooks.Event) {
		if ge, ok := ev.(*hooks.GatewayError); ok {
			mu.Lock()
			events = append(events, ge.Error)
			mu.Unlock()
		}
	})
	const plain = "error:" + adminFaultText

	srv.Push(openaitest.Reply{Status: http.StatusUnauthorized, Message: "Incorrect API key provided: sk-wrong"})
	if got := e.say(t, "k1", "m1", "hello"); got != plain {
		t.Errorf("the chat got %q; want %q", got, plain)
	}
	if !strings.Contains(logs.String(), "llm.api_key") {
		t.Errorf("the log does not name llm.api_key:\n%s", logs.String())
	}
	mu.Lock()
	if len(events) != 1 || !strings.Contains(events[0], "llm.api_key") {
		t.Errorf("gateway:error events %q; want one naming llm.api_key", events)
	}
	mu.Unlock()

	for _, r := range []openaitest.Reply{
		{Status: http.StatusForbidden, Message: "Country, region, or territory not supported"},
		{Status: http.StatusNotFound, Message: "The model `gpt-test` does not exist"},
		{Status: http.StatusTooManyRequests, Code: "insufficient_quota", Message: "You exceeded your current quota"},
	} {
		srv.Push(r)
		if got := e.say(t, "k1", "m"+r.Message, "hello"); got != plain {
			t.Errorf("HTTP %d: the chat got %q; want %q", r.Status, got, plain)
		}
	}

	// /compact failing the same way is told the same way.
	for _, text := range []string{"one", "two", "three", "four"} {
		e.say(t, "k2", "c"+text, strings.Repeat(text+" ", 200))
	}
	srv.Push(openaitest.Reply{Status: http.StatusUnauthorized, Message: "Incorrect API key provided"})
	if got := e.say(t, "k2", "c-compact", "/compact"); got != plain {
		t.Errorf("/compact: the chat got %q; want %q", got, plain)
	}

	// A failure the user can act on keeps its own words.
	srv.Push(openaitest.Reply{Status: http.StatusBadRequest, Message: "the image is too large"})
	if got := e.say(t, "k1", "m-bad", "hello"); !strings.Contains(got, "the image is too large") {
		t.Errorf("a 400: the chat got %q; want the API's reason", got)
	}
}
