package gateway

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-telegram/bot/models"

	"gateway/channels"
	"gateway/channels/telegram"
	"gateway/channels/telegram/telegramtest"
	"gateway/harness"
	"gateway/internal/secret"
)

func groupTelegram(t *testing.T, tg *telegramtest.Server, allow ...string) *telegram.Channel {
	t.Helper()
	ch, err := telegram.New(telegram.Config{Enabled: true, Token: secret.Secret(tg.Token), APIURL: tg.URL, Mode: telegram.ModePolling,
		Access: channels.Access{AllowFrom: allow, DMPolicy: channels.DMAllowlist, RequireMention: true}},
		telegram.Options{StateDir: t.TempDir(), PollTimeout: time.Second, Pacing: telegram.Pacing{GlobalPerSecond: -1, PerChatInterval: -1, GroupInterval: -1}})
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func waitPosted(t *testing.T, tg *telegramtest.Server, chat int64, what string, ok func([]telegramtest.Message) bool) []telegramtest.Message {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		msgs := tg.Messages(chat)
		if ok(msgs) {
			return msgs
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, m := range msgs {
				fmt.Fprintf(&b, "\n  [topic %d reply %d] %q", m.ThreadID, m.ReplyTo, m.Text)
			}
			t.Fatalf("%s: posted%s", what, b.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// In a Telegram group with one bot, /stop picked from the menu arrives without @bot: it
// stops the answer in progress in that topic and drops what waited, while another topic's
// conversation goes on, each answer quoting the message it answers.
func TestGroupStopFromTheMenuStopsTheBusyAnswer(t *testing.T) {
	tg := telegramtest.NewServer(t)
	bob := &models.User{ID: 77, FirstName: "Bob", Username: "bob"}
	ch := groupTelegram(t, tg, fmt.Sprint(telegramtest.UserID), "77")
	e := newEnvWith(t, t.TempDir(), []channels.Channel{ch})
	e.fake.SetFunc(func(req *harness.Request) harness.FakeReply {
		last := req.Messages[len(req.Messages)-1].Content
		if strings.Contains(last, "long") {
			return harness.FakeReply{Chunks: []string{"part one ", "part two"}, ChunkDelay: time.Hour}
		}
		return harness.FakeReply{Text: "answer to " + last}
	})
	_, long := tg.Send(telegramtest.Update{ChatID: -500, ThreadID: 5, Mention: true, Text: "tell me something long"})
	waitPosted(t, tg, -500, "the start of the long answer", func(m []telegramtest.Message) bool { return len(m) > 0 })
	tg.Send(telegramtest.Update{ChatID: -500, ThreadID: 5, From: bob, Mention: true, Text: "and my question"})
	_, other := tg.Send(telegramtest.Update{ChatID: -500, ThreadID: 6, Mention: true, Text: "other topic"})
	_, stop := tg.Send(telegramtest.Update{ChatID: -500, ThreadID: 5, From: bob, Text: "/stop"})
	msgs := waitPosted(t, tg, -500, "the stop and the other topic's answer", func(m []telegramtest.Message) bool {
		stopped, answered := false, false
		for _, x := range m {
			stopped = stopped || x.Text == "Stopped. I also dropped 1 queued message(s)." && x.ThreadID == 5 && x.ReplyTo == stop
			answered = answered || x.Text == "answer to alice: other topic" && x.ThreadID == 6 && x.ReplyTo == other
		}
		return stopped && answered
	})
	if msgs[0].Text != "part one" || msgs[0].ThreadID != 5 || msgs[0].ReplyTo != long {
		t.Errorf("the stopped answer is %+v; want what was said so far, in topic 5, quoting the question", msgs[0])
	}
	for _, r := range e.fake.Requests() {
		if last := r.Messages[len(r.Messages)-1].Content; strings.Contains(last, "my question") || strings.Contains(last, "/stop") {
			t.Errorf("the model was asked %q after /stop", last)
		}
	}
}
