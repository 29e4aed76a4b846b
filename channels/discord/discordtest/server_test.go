package discordtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/goleak"

	"gateway/internal/fakeserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func post(t *testing.T, s *Server, token, path string, body any) *http.Response {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", s.URL+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bot "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func TestFakeEnforcesDiscordRules(t *testing.T) {
	s := New(t)
	tok := s.Bot().Token
	s.AddDM("1")
	if r := post(t, s, tok, "/api/v9/channels/1/messages", map[string]string{"content": strings.Repeat("é", MaxContent)}); r.StatusCode != 200 {
		t.Errorf("2000 characters: %d", r.StatusCode)
	}
	if r := post(t, s, tok, "/api/v9/channels/1/messages", map[string]string{"content": strings.Repeat("é", MaxContent+1)}); r.StatusCode != 400 {
		t.Errorf("2001 characters: %d; want 400", r.StatusCode)
	}
	if r := post(t, s, "wrong", "/api/v9/channels/1/messages", map[string]string{"content": "x"}); r.StatusCode != 401 {
		t.Errorf("wrong token: %d; want 401", r.StatusCode)
	}
	if r := post(t, s, tok, "/api/v9/channels/1/messages", map[string]any{"content": "", "flags": FlagVoiceMessage}); r.StatusCode != 400 {
		t.Errorf("voice flag without a file: %d; want 400", r.StatusCode)
	}
	s.FailNext(1, fakeserver.Failure{})
	if r := post(t, s, tok, "/api/v9/channels/1/messages", map[string]string{"content": "x"}); r.StatusCode != 500 {
		t.Errorf("injected failure: %d; want 500", r.StatusCode)
	}
	if n := len(s.Posted("1")); n != 1 {
		t.Errorf("%d messages stored; want only the valid one", n)
	}
	s.FailNext(1, fakeserver.Failure{Method: "typing", RetryAfter: 1500 * time.Millisecond})
	if r := post(t, s, tok, "/api/v9/channels/1/typing", nil); r.StatusCode != 429 || r.Header.Get("Retry-After") != "2" {
		t.Errorf("injected typing 429: %d, Retry-After %q", r.StatusCode, r.Header.Get("Retry-After"))
	}
	if r := post(t, s, tok, "/api/v9/channels/1/typing", nil); r.StatusCode != 204 || s.Typing("1") != 1 {
		t.Errorf("typing after the injected 429: %d, counted %d", r.StatusCode, s.Typing("1"))
	}

	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(s.URL, "http")+"/ws/?v=9", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	var hello struct{ Op int }
	if err := ws.ReadJSON(&hello); err != nil || hello.Op != 10 {
		t.Fatalf("hello: %+v %v", hello, err)
	}
	ws.WriteJSON(map[string]any{"op": 2, "d": map[string]any{"token": "Bot wrong", "intents": 0}})
	_, _, err = ws.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != 4004 {
		t.Errorf("identify with a wrong token: %v; want close 4004", err)
	}
}

func TestFakeChannelHistory(t *testing.T) {
	s := New(t)
	tok := s.Bot().Token
	var ids []string
	for i := range 5 {
		ids = append(ids, s.InjectDM("9", "1001", string(rune('a'+i))))
	}
	other := s.AddBot("other")
	get := func(token, query string) (int, []string) {
		t.Helper()
		req, _ := http.NewRequest("GET", s.URL+"/api/v9/channels/9/messages?"+query, nil)
		req.Header.Set("Authorization", "Bot "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ms []struct {
			ID      string `json:"id"`
			GuildID string `json:"guild_id"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&ms)
		var out []string
		for _, m := range ms {
			if m.GuildID != "" {
				t.Errorf("a REST message carries guild_id")
			}
			out = append(out, m.ID)
		}
		return resp.StatusCode, out
	}
	eq := func(got []string, want ...string) bool { return strings.Join(got, ",") == strings.Join(want, ",") }
	// Newest first, as Discord answers, whichever way it pages.
	if _, got := get(tok, "after="+ids[1]+"&limit=2"); !eq(got, ids[3], ids[2]) {
		t.Errorf("after=%s&limit=2: %v; want the two right after it, newest first", ids[1], got)
	}
	if _, got := get(tok, "limit=2"); !eq(got, ids[4], ids[3]) {
		t.Errorf("limit=2: %v; want the two newest", got)
	}
	if _, got := get(tok, "before="+ids[2]); !eq(got, ids[1], ids[0]) {
		t.Errorf("before=%s: %v", ids[2], got)
	}
	if code, _ := get(tok, "limit=101"); code != 400 {
		t.Errorf("limit=101: %d; want 400", code)
	}
	if code, _ := get(other.Token, "limit=1"); code != 403 {
		t.Errorf("another bot's DM: %d; want 403", code)
	}
	if calls := s.Calls(); calls[len(calls)-1].Query != "limit=1" {
		t.Errorf("the call's query was not recorded: %+v", calls[len(calls)-1])
	}
}

// A channel the fake was never told of (no user wrote in it, no test added it), or one
// deleted since, is refused as Discord refuses a channel the bot cannot see: 404 with
// Discord's error JSON, code 10003; nothing is stored.
func TestFakeRefusesChannelsItDoesNotKnow(t *testing.T) {
	s := New(t)
	tok := s.Bot().Token
	refused := func(path string) {
		t.Helper()
		req, _ := http.NewRequest("POST", s.URL+path, strings.NewReader(`{"content": "hello"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bot "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Message string `json:"message"`
			Code    int    `json:"code"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 404 || body.Code != 10003 || body.Message != "Unknown Channel" {
			t.Errorf("POST %s: %d %+v (%v); want 404 {code 10003, Unknown Channel}", path, resp.StatusCode, body, err)
		}
	}
	refused("/api/v9/channels/42/messages")
	refused("/api/v9/channels/42/typing")
	s.AddGuildChannel("43")
	if r := post(t, s, tok, "/api/v9/channels/43/messages", map[string]string{"content": "x"}); r.StatusCode != 200 {
		t.Errorf("post to an added channel: %d", r.StatusCode)
	}
	s.DeleteChannel("43")
	refused("/api/v9/channels/43/messages")
	if n := len(s.Messages("42")) + len(s.Messages("43")); n != 0 {
		t.Errorf("%d messages stored in unknown channels", n)
	}
}
