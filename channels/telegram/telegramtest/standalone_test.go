package telegramtest

import (
	"strconv"
	"sync"
	"testing"
)

func TestStartTellsOnSentOfEverySendAndForgetsCalls(t *testing.T) {
	var mu sync.Mutex
	var seen []Message
	s := Start(Options{OnSent: func(m Message) {
		mu.Lock()
		seen = append(seen, m)
		mu.Unlock()
	}})
	defer s.Close()
	s.AddChat(42)
	sent := call(t, s, s.Token, "sendMessage", `{"chat_id":42,"text":"<b>hi</b>","parse_mode":"HTML"}`, "application/json")
	if !sent.OK {
		t.Fatalf("sendMessage: %+v", sent)
	}
	id := s.Messages(42)[0].ID
	edit := call(t, s, s.Token, "editMessageText", `{"chat_id":42,"message_id":`+strconv.Itoa(id)+`,"text":"hello"}`, "application/json")
	if !edit.OK {
		t.Fatalf("editMessageText: %+v", edit)
	}
	// Failures and calls that post nothing are not sends.
	call(t, s, s.Token, "sendMessage", `{"chat_id":42,"text":""}`, "application/json")
	call(t, s, s.Token, "getMe", `{}`, "application/json")
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0].Text != "hi" || seen[1].Text != "hello" || seen[1].Edits != 1 || seen[1].ChatID != 42 {
		t.Fatalf("OnSent saw %+v; want the send and the edit of chat 42", seen)
	}
	if len(s.Calls("")) != 4 {
		t.Fatalf("calls: %d", len(s.Calls("")))
	}
	s.ForgetCalls()
	if len(s.Calls("")) != 0 || len(s.Messages(42)) != 1 {
		t.Fatalf("after ForgetCalls: %d calls, %d messages; want no calls and the message kept", len(s.Calls("")), len(s.Messages(42)))
	}
}
