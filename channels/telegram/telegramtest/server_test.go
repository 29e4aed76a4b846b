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
	s.AddChat(5)
	s.AddChat(6)
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
	s.AddChat(5)
	s.AddChat(6)
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

// The fake knows the chats a user wrote in, and those added, and refuses any call about
// another as Telegram does; an upgraded group's new id is one the bot may post in.
func TestFakeKnowsItsChats(t *testing.T) {
	s := NewServer(t)
	send := func(chat int64, method string) answer {
		return call(t, s, Token, method, `{"chat_id":`+strconv.FormatInt(chat, 10)+`,"text":"hi","action":"typing","message_id":1}`, "application/json")
	}
	for _, method := range []string{"sendMessage", "editMessageText", "deleteMessage", "sendChatAction"} {
		if a := send(9, method); a.OK || a.ErrorCode != 400 || a.Description != "Bad Request: chat not found" {
			t.Errorf("%s to a chat nobody wrote in: %+v; want 400 chat not found", method, a)
		}
	}
	resp, err := http.Post(s.URL+"/bot"+Token+"/sendDocument", "multipart/form-data; boundary=b",
		strings.NewReader("--b\r\nContent-Disposition: form-data; name=\"chat_id\"\r\n\r\n9\r\n"+
			"--b\r\nContent-Disposition: form-data; name=\"document\"; filename=\"a.txt\"\r\n\r\nabc\r\n--b--\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 || len(s.Messages(9)) != 0 {
		t.Errorf("a document to a chat nobody wrote in: HTTP %d, %d messages; want 400 and none", resp.StatusCode, len(s.Messages(9)))
	}

	s.Send(Update{ChatID: 7, Text: "hello"})
	s.Send(Update{ChatID: -100, Text: "hello group"})
	s.SendMessageJSON(`{"message_id":5,"date":1,"chat":{"id":-200,"type":"supergroup","title":"G"},"text":"raw"}`)
	s.AddChat(8)
	s.Migrate(-300, -1000300)
	for _, chat := range []int64{7, -100, -200, 8, -1000300} {
		if a := send(chat, "sendMessage"); !a.OK {
			t.Errorf("a send to known chat %d: %+v", chat, a)
		}
	}
	if a := send(-300, "sendMessage"); a.ErrorCode != 400 || !strings.Contains(a.Description, "upgraded to a supergroup") {
		t.Errorf("a send to the upgraded group's old id: %+v; want the migration's answer", a)
	}
}
