package telegramtest

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"gateway/internal/fakeserver"
)

type answer struct {
	OK          bool            `json:"ok"`
	Result      json.RawMessage `json:"result"`
	ErrorCode   int             `json:"error_code"`
	Description string          `json:"description"`
	Parameters  struct {
		RetryAfter int `json:"retry_after"`
	} `json:"parameters"`
}

func call(t *testing.T, s *Server, token, method, body, contentType string) answer {
	t.Helper()
	resp, err := http.Post(s.URL+"/bot"+token+"/"+method, contentType, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	return a
}

func TestFakeChecksWhatTelegramChecks(t *testing.T) {
	s := NewServer(t)
	if a := call(t, s, "1:wrong", "getMe", "{}", "application/json"); a.ErrorCode != 401 {
		t.Errorf("wrong token: %+v", a)
	}
	js := func(v map[string]any) string { b, _ := json.Marshal(v); return string(b) }
	cases := []struct {
		text, mode, want string
	}{
		{"<b>fine</b> &amp; good", "HTML", ""},
		{"<b>open", "HTML", "can't parse entities: Can't find end tag"},
		{"<div>x</div>", "HTML", "Unsupported start tag \"div\""},
		{"<b><i>x</b></i>", "HTML", "Unmatched end tag"},
		{"<code><b>x</b></code>", "HTML", "Can't nest"},
		{"&bogus; x", "HTML", "Unsupported HTML entity"},
		{strings.Repeat("😀", 2049), "", "message is too long"}, // 4098 UTF-16 units
		{strings.Repeat("a", 4096), "", ""},
		{"<b>" + strings.Repeat("a", 4096) + "</b>", "HTML", ""}, // tags do not count
		{"  ", "", "message text is empty"},
	}
	for _, c := range cases {
		a := call(t, s, Token, "sendMessage", js(map[string]any{"chat_id": 5, "text": c.text, "parse_mode": c.mode}), "application/json")
		if c.want == "" && !a.OK || c.want != "" && !strings.Contains(a.Description, c.want) {
			t.Errorf("text %.30q: answer %+v; want %q", c.text, a, c.want)
		}
	}
	// Form bodies work too, and an unchanged edit is refused as Telegram does.
	form := url.Values{"chat_id": {"6"}, "text": {"same"}}.Encode()
	a := call(t, s, Token, "sendMessage", form, "application/x-www-form-urlencoded")
	var m struct {
		ID int `json:"message_id"`
	}
	json.Unmarshal(a.Result, &m)
	a = call(t, s, Token, "editMessageText", js(map[string]any{"chat_id": 6, "message_id": m.ID, "text": "same"}), "application/json")
	if !strings.Contains(a.Description, "message is not modified") {
		t.Errorf("unchanged edit: %+v", a)
	}
	s.FailNext(1, fakeserver.Failure{RetryAfter: 1500 * time.Millisecond})
	a = call(t, s, Token, "sendMessage", js(map[string]any{"chat_id": 6, "text": "x"}), "application/json")
	if a.ErrorCode != 429 || a.Parameters.RetryAfter != 2 {
		t.Errorf("injected 429: %+v; want retry_after 2 (whole seconds, rounded up)", a)
	}
}

func TestFakeLongPollWaitsAndConfirms(t *testing.T) {
	s := NewServer(t)
	start := time.Now()
	a := call(t, s, Token, "getUpdates", `{"timeout":1}`, "application/json")
	if string(a.Result) != "[]" || time.Since(start) < time.Second {
		t.Errorf("empty long poll returned %s after %v; want [] after the 1s timeout", a.Result, time.Since(start))
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		s.Send(Update{ChatID: 7, Text: "wake"})
	}()
	a = call(t, s, Token, "getUpdates", `{"timeout":10}`, "application/json")
	var ups []struct {
		ID int64 `json:"update_id"`
	}
	json.Unmarshal(a.Result, &ups)
	if len(ups) != 1 {
		t.Fatalf("long poll got %s", a.Result)
	}
	// Asking from past it confirms it: it is gone.
	next := ups[0].ID + 1
	a = call(t, s, Token, "getUpdates", `{"offset":`+strconv.FormatInt(next, 10)+`,"timeout":0}`, "application/json")
	if string(a.Result) != "[]" || s.Pending() != 0 {
		t.Errorf("after confirming, getUpdates gave %s and %d pending", a.Result, s.Pending())
	}
}

// A failure scripted for one method in one chat hits only that chat and method.
func TestFakeRateLimitsOneChat(t *testing.T) {
	s := NewServer(t)
	s.FailNext(1, fakeserver.Failure{Method: "sendChatAction", Chat: "5", RetryAfter: 1500 * time.Millisecond})
	send := func(chat int, method string) answer {
		return call(t, s, Token, method, `{"chat_id":`+strconv.Itoa(chat)+`,"text":"hi","action":"typing"}`, "application/json")
	}
	if a := send(6, "sendChatAction"); !a.OK {
		t.Errorf("another chat: %+v", a)
	}
	if a := send(5, "sendMessage"); !a.OK {
		t.Errorf("another method: %+v", a)
	}
	if a := send(5, "sendChatAction"); a.ErrorCode != 429 || a.Parameters.RetryAfter != 2 {
		t.Errorf("the limited call: %+v; want 429 with retry_after 2", a)
	}
	if a := send(5, "sendChatAction"); !a.OK {
		t.Errorf("the call after: %+v", a)
	}
}
