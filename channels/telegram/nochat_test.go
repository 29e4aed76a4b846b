package telegram_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/telegram"
	"gateway/channels/telegram/telegramtest"
	"gateway/internal/fakeserver"
)

// sendsTo counts the sendMessage calls made to chat.
func sendsTo(srv *telegramtest.Server, chat int64) int {
	n := 0
	for _, c := range srv.Calls("sendMessage") {
		if c.Params["chat_id"] == strconv.FormatInt(chat, 10) {
			n++
		}
	}
	return n
}

// Telegram's refusals that mean the bot cannot reach the chat fail the answer at once
// (Telegram asked once: no retry mends them), marked channels.ErrNoChat, in words that say
// what happened, with Telegram's description for the details and no token. Other
// refusals are not marked, and a group upgraded to a supergroup is not a chat gone: the
// answer goes on in the new one.
func TestUnreachableChatIsToldInWords(t *testing.T) {
	f := newFixture(t)
	ch := f.start(f.config(), f.options(), channeltest.NewSink())
	cases := []struct {
		status      int
		desc, words string
		noChat      bool
	}{
		{400, "Bad Request: chat not found", "deleted, or the bot is not in it", true},
		{403, "Forbidden: bot was blocked by the user", "the user blocked the bot", true},
		{403, "Forbidden: bot was kicked from the group chat", "the bot was removed from this chat", true},
		{403, "Forbidden: bot was kicked from the supergroup chat", "the bot was removed from this chat", true},
		{403, "Forbidden: user is deactivated", "deleted their Telegram account", true},
		{403, "Forbidden: bot is not a member of the channel chat", "the bot is not a member of this chat", true},
		{403, "Forbidden: bot can't initiate conversation with a user", "press Start", true},
		{400, "Bad Request: have no rights to send a message", "", false},
	}
	for i, c := range cases {
		chat := int64(5100 + i)
		f.chats(chat)
		f.srv.FailNext(1, fakeserver.Failure{Status: c.status, Message: c.desc, Chat: strconv.FormatInt(chat, 10)})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		st, err := ch.Open(ctx, channels.Target{Channel: telegram.Name, ChatID: strconv.FormatInt(chat, 10), ChatType: channels.ChatDM})
		if err == nil {
			err = st.Send(ctx, done("to nowhere"))
		}
		cancel()
		if err == nil {
			t.Errorf("%q: the answer went through", c.desc)
			continue
		}
		if errors.Is(err, channels.ErrNoChat) != c.noChat {
			t.Errorf("%q: %v; marked ErrNoChat %v, want %v", c.desc, err, !c.noChat, c.noChat)
		}
		if !strings.Contains(err.Error(), c.words) || !strings.Contains(err.Error(), c.desc) {
			t.Errorf("%q: the error says %q; want %q in words, and Telegram's description", c.desc, err, c.words)
		}
		if strings.Contains(err.Error(), telegramtest.Token) {
			t.Errorf("%q: the error holds the token", c.desc)
		}
		if n := sendsTo(f.srv, chat); n != 1 {
			t.Errorf("%q: Telegram was asked %d times; want once", c.desc, n)
		}
	}

	f.srv.Migrate(-5200, -1005200)
	answer(t, ch, channels.Target{Channel: telegram.Name, ChatID: "-5200", ChatType: channels.ChatGroup}, done("moved on"))
	if m := f.srv.Messages(-1005200); len(m) != 1 || m[0].Text != "moved on" {
		t.Errorf("the upgraded group's new chat shows %+v; want the answer", m)
	}
}

// An answer to a chat Telegram does not know (no user wrote there, none was added) fails
// marked ErrNoChat, and its typing indicator is not refreshed: Telegram would only refuse
// it again. Another answer's indicator, refreshed meanwhile, is the clock.
func TestTypingStopsInAChatTelegramDoesNotKnow(t *testing.T) {
	f := newFixture(t)
	f.chats(1001)
	opts := f.options()
	opts.TypingInterval = 20 * time.Millisecond
	ch := f.start(f.config(), opts, channeltest.NewSink())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func(chat string) channels.Stream {
		st, err := ch.Open(ctx, channels.Target{Channel: telegram.Name, ChatID: chat, ChatType: channels.ChatDM})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(ctx, channels.Frame{Type: channels.FrameStart}); err != nil {
			t.Fatal(err)
		}
		return st
	}
	gone, known := open("5300"), open("1001")
	eventually(t, "the known chat's typing refreshed a few times", func() bool { return f.srv.Typing(1001) >= 5 })
	var asked int
	for _, c := range f.srv.Calls("sendChatAction") {
		if c.Params["chat_id"] == "5300" {
			asked++
			if c.Status != http.StatusBadRequest {
				t.Errorf("typing in the unknown chat was answered %d; want 400", c.Status)
			}
		}
	}
	if asked != 1 {
		t.Errorf("typing was sent %d times to a chat Telegram does not know; want once", asked)
	}
	if err := gone.Send(ctx, done("to nowhere")); !errors.Is(err, channels.ErrNoChat) {
		t.Errorf("the answer to the unknown chat: %v; want it marked ErrNoChat", err)
	}
	if err := known.Send(ctx, done("here")); err != nil {
		t.Errorf("the answer to the known chat: %v", err)
	}
}
