package gateway

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/channels"
	"gateway/channels/discord"
	"gateway/channels/discord/discordtest"
	"gateway/channels/slack"
	"gateway/channels/slack/slacktest"
	"gateway/channels/telegram"
	"gateway/channels/telegram/telegramtest"
	"gateway/harness"
	"gateway/hooks"
	"gateway/internal/secret"
	"gateway/state"
)

// pending counts the journal's unanswered messages.
func pending(db *state.DB) int {
	p, _ := db.Pending()
	return len(p)
}

// stopInBackground starts Stop with a long deadline and waits until it has begun (the
// gateway drains its turns meanwhile); the returned channel gets Stop's result.
func stopInBackground(t *testing.T, g *Gateway) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done <- g.Stop(ctx)
	}()
	waitUntil(t, "start of Stop", func() bool { return g.notReady(context.Background()) == "shutting down" })
	return done
}

// A message sent on Discord, Slack or Telegram while the gateway drains a slow turn before
// it stops is answered after the restart on the same state, exactly once. Refused, it was
// lost on the first two: Discord never offers a message again (and its catch-up cursor had
// passed it), and Slack offered it only to the closing connection until it gave up.
// (Telegram kept it, its offset held, but polled it again and again meanwhile.)
func TestMessageSentDuringShutdownIsAnsweredAfterRestart(t *testing.T) {
	dir := t.TempDir()
	db := openState(t, dir)
	defer db.Close()
	access := channels.Access{AllowFrom: []string{"4242", strconv.Itoa(telegramtest.UserID)}, DMPolicy: channels.DMAllowlist}
	dc := discordtest.New(t)
	sl := slacktest.New(t)
	tg := telegramtest.NewServer(t)
	adapters := func() []channels.Channel {
		dcCh, err := discord.New(discord.Config{Enabled: true, Token: secret.Secret(dc.Bot().Token), APIURL: dc.URL, Access: access},
			discord.Options{StateDir: t.TempDir(), State: db})
		if err != nil {
			t.Fatal(err)
		}
		slCh, err := slack.New(slack.Config{Enabled: true, BotToken: secret.Secret(slacktest.BotToken), AppToken: secret.Secret(slacktest.AppToken),
			APIURL: sl.APIURL(), Access: access}, slack.Options{StateDir: t.TempDir(), State: db})
		if err != nil {
			t.Fatal(err)
		}
		tgCh, err := telegram.New(telegram.Config{Enabled: true, Token: secret.Secret(tg.Token), APIURL: tg.URL, Mode: telegram.ModePolling, Access: access},
			telegram.Options{StateDir: t.TempDir(), State: db, PollTimeout: time.Second,
				Pacing: telegram.Pacing{GlobalPerSecond: -1, PerChatInterval: -1, GroupInterval: -1}})
		if err != nil {
			t.Fatal(err)
		}
		return []channels.Channel{dcCh, slCh, tgCh}
	}
	const dm, slackDM, tgChat = "dm-1", "D4242", 4242
	bot := dc.Bot().ID

	first := newEnvWith(t, filepath.Join(dir, "sessions"), adapters(), withDurable(db))
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	working := make(chan string, 10)
	first.fake.SetFunc(func(req *harness.Request) harness.FakeReply {
		working <- lastUser(*req)
		select { // the slow turn: it ends when the test says
		case <-release:
		case <-time.After(30 * time.Second):
		}
		return harness.FakeReply{Text: "answer to " + lastUser(*req)}
	})
	dc.InjectDM(dm, "4242", "first on discord")
	sl.DM(slackDM, "4242", "first on slack")
	tg.Send(telegramtest.Update{ChatID: tgChat, Text: "first on telegram"})
	for range 3 {
		select {
		case <-working:
		case <-time.After(15 * time.Second):
			t.Fatal("the model never saw the first messages")
		}
	}

	stopped := stopInBackground(t, first.g)
	dc.InjectDM(dm, "4242", "second on discord")
	sl.DM(slackDM, "4242", "second on slack")
	tg.Send(telegramtest.Update{ChatID: tgChat, Text: "second on telegram"})
	waitUntil(t, "journal entry for each message sent during shutdown", func() bool { return pending(db) == 6 })
	waitUntil(t, "ack of the Slack envelope sent during shutdown", func() bool {
		envs := sl.Envelopes()
		for _, e := range envs {
			if !e.Acked {
				return false
			}
		}
		return len(envs) == 2
	})
	once.Do(func() { close(release) })
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("stop: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Stop did not return")
	}
	if got := dc.PostedBy(bot, dm); len(got) != 1 || !strings.Contains(got[0].Content, "first on discord") {
		t.Fatalf("Discord got %+v before the restart; want the answer to the first message only", got)
	}
	if got := sl.Posted(slackDM); len(got) != 1 || !strings.Contains(got[0].Text, "first on slack") {
		t.Fatalf("Slack got %+v before the restart; want the answer to the first message only", got)
	}
	if got := tg.Messages(tgChat); len(got) != 1 || !strings.Contains(got[0].Text, "first on telegram") {
		t.Fatalf("Telegram got %+v before the restart; want the answer to the first message only", got)
	}
	if n := pending(db); n != 3 {
		t.Fatalf("the journal holds %d messages after Stop; want the 3 sent during shutdown", n)
	}
	if n := tg.Pending(); n != 0 {
		t.Fatalf("Telegram holds %d unconfirmed updates; want the one sent during shutdown confirmed, it is journaled", n)
	}

	model := harness.NewFake()
	model.SetFunc(func(req *harness.Request) harness.FakeReply {
		return harness.FakeReply{Text: "answer to " + lastUser(*req)}
	})
	newEnvWith(t, filepath.Join(dir, "sessions"), adapters(), withDurable(db), func(_ *Config, _ *Runtime, d *Deps) {
		d.NewProvider = func(harness.Config) (harness.Provider, error) { return model, nil }
	})
	waitUntil(t, "answer after the restart to the messages sent during shutdown", func() bool {
		return len(dc.PostedBy(bot, dm)) >= 2 && len(sl.Posted(slackDM)) >= 2 && len(tg.Messages(tgChat)) >= 2
	})
	time.Sleep(time.Second) // a second answer (a catch-up or a redelivery taken again) would come now
	dcGot, slGot, tgGot := dc.PostedBy(bot, dm), sl.Posted(slackDM), tg.Messages(tgChat)
	if len(dcGot) != 2 || !strings.Contains(dcGot[1].Content, "second on discord") {
		t.Errorf("Discord answers %+v; want the message sent during shutdown answered once", dcGot)
	}
	if len(slGot) != 2 || !strings.Contains(slGot[1].Text, "second on slack") {
		t.Errorf("Slack answers %+v; want the message sent during shutdown answered once", slGot)
	}
	if len(tgGot) != 2 || !strings.Contains(tgGot[1].Text, "second on telegram") {
		t.Errorf("Telegram answers %+v; want the message sent during shutdown answered once", tgGot)
	}
	if n := len(model.Requests()); n != 3 {
		t.Errorf("%d model calls after the restart; want 3", n)
	}
	waitUntil(t, "empty journal once everything was answered", func() bool { return pending(db) == 0 })
}

// drainingBehindASlowTurn starts a turn in chat "busy" that runs until release, then a Stop
// that drains it (its result comes on stopped), and returns with a client of chat "later"
// to speak during the drain.
func drainingBehindASlowTurn(t *testing.T, e *testEnv) (busy, later *wsClient, release func(), stopped <-chan error) {
	t.Helper()
	ch := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release)
	working := make(chan struct{}, 1)
	e.fake.SetFunc(func(req *harness.Request) harness.FakeReply {
		working <- struct{}{}
		select { // the slow turn: it ends when the test says
		case <-ch:
		case <-time.After(30 * time.Second):
		}
		return harness.FakeReply{Text: "ok"}
	})
	busy, later = e.client(t, "busy"), e.client(t, "later")
	busy.say("a long question")
	select {
	case <-working:
	case <-time.After(15 * time.Second):
		t.Fatal("the model never saw the first message")
	}
	return busy, later, release, stopInBackground(t, e.g)
}

// A gateway without a journal cannot keep a message for after the restart: while it drains,
// the web chat tells the user that it is shutting down and to send the message again, not
// that the assistant is busy (which invites a retry before the restart).
func TestWebMessageDuringShutdownWithoutJournalSaysShuttingDown(t *testing.T) {
	e := newEnv(t)
	busy, later, release, stopped := drainingBehindASlowTurn(t, e)
	id := later.say("hello?")
	fs := later.until("error", "done")
	last := fs[len(fs)-1]
	if last.Type != "error" || last.ReplyTo != id || !strings.Contains(last.Text, "shutting down") {
		t.Fatalf("the user was told %+v; want an error for %s saying that the gateway is shutting down", last, id)
	}
	release()
	if fs := busy.until("done", "error"); fs[len(fs)-1].Type != "done" {
		t.Fatalf("the running turn ended with %+v; want it finished during the drain", fs[len(fs)-1])
	}
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	if n := len(e.fake.Requests()); n != 1 {
		t.Fatalf("%d model calls; want only the first message's", n)
	}
}

// A gateway with a journal keeps a web message sent while it drains and answers it after the
// restart; the web chat tells the user so at once, where before they saw nothing and were
// left to send it again.
func TestWebMessageDuringShutdownIsToldItIsAnsweredAfterRestart(t *testing.T) {
	dir := t.TempDir()
	db := openState(t, dir)
	defer db.Close()
	e := newEnvIn(t, filepath.Join(dir, "sessions"), withDurable(db))
	_, later, release, stopped := drainingBehindASlowTurn(t, e)
	id := later.say("hello?")
	fs := later.until("error", "done")
	last := fs[len(fs)-1]
	if last.Type != "done" || last.ReplyTo != id || !strings.Contains(last.Text, "restarting") || !strings.Contains(last.Text, "answer this message when I'm back") {
		t.Fatalf("the user was told %+v; want an answer to %s saying the gateway restarts and answers it when back", last, id)
	}
	release()
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	if n := pending(db); n != 1 {
		t.Fatalf("the journal holds %d messages after Stop; want the one sent during shutdown, for after the restart", n)
	}
	if n := len(e.fake.Requests()); n != 1 {
		t.Fatalf("%d model calls; want only the first message's", n)
	}
}

// A message still in its receive hooks (a voice note being transcribed) when the shutdown
// deadline passes stays journaled for the restart, and its chat is told so, as a chat whose
// message waited in the queue is: before, it got silence until the next start.
func TestMessageCutInItsReceiveHooksByShutdownIsTold(t *testing.T) {
	dir := t.TempDir()
	db := openState(t, dir)
	defer db.Close()
	e := newEnvIn(t, filepath.Join(dir, "sessions"), withDurable(db))
	entered := make(chan struct{})
	var once sync.Once
	e.bus.On(hooks.NameMessageReceive, "test:slow-stt", func(ctx context.Context, ev hooks.Event) (any, error) {
		once.Do(func() { close(entered) })
		<-ctx.Done() // transcribing until the shutdown cuts it
		return nil, nil
	})
	e.mem.inject(t, "c1", "1", "a voice note")
	select {
	case <-entered:
	case <-time.After(15 * time.Second):
		t.Fatal("the receive hook never ran")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := e.g.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	got := e.mem.finals("c1")
	if len(got) != 1 || !strings.Contains(got[0], "restarting") || !strings.Contains(got[0], "when I'm back") {
		t.Fatalf("the chat was told %q; want one note that the gateway restarts and answers when back", got)
	}
	if n := pending(db); n != 1 {
		t.Fatalf("the journal holds %d messages; want the cut one, for after the restart", n)
	}
	if n := len(e.fake.Requests()); n != 0 {
		t.Fatalf("%d model calls; want none", n)
	}
}
