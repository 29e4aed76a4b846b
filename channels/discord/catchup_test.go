package discord_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"gateway/channels"
	"gateway/channels/discord"
	"gateway/channels/discord/discordtest"
)

// outage takes the gateway away: sockets drop and new ones are refused until the
// returned func is called. With resumable false the sessions are forgotten too, so the
// reconnect's RESUME is refused and the client identifies again.
func outage(t *testing.T, e *env, resumable bool) (end func()) {
	t.Helper()
	e.srv.RefuseGateway(true)
	if resumable {
		e.srv.Drop()
	} else {
		e.srv.InvalidateSessions()
	}
	waitFor(t, "the loss reported", func() bool {
		h := e.sink.Connections()
		return len(h) > 0 && !h[len(h)-1].Up
	})
	return func() {
		e.srv.RefuseGateway(false)
		waitFor(t, "the connection reported up again", func() bool {
			h := e.sink.Connections()
			return len(h) > 0 && h[len(h)-1].Up
		})
	}
}

// listCalls returns the GET channel messages requests for channel.
func listCalls(srv *discordtest.Server, channel string) []discordtest.Call {
	var out []discordtest.Call
	for _, c := range srv.Calls() {
		if c.Method == "GET" && strings.HasSuffix(c.Path, "/channels/"+channel+"/messages") {
			out = append(out, c)
		}
	}
	return out
}

func expectText(t *testing.T, e *env, want string) *channels.Message {
	t.Helper()
	m := e.sink.Next(t)
	if got := m.Text(); got != want {
		t.Fatalf("delivered %q; want %q", got, want)
	}
	return m
}

func TestUnresumedReconnectReadsMissedDMs(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	before := srv.InjectDM("701", user, "before")
	expectText(t, e, "before")

	end := outage(t, e, false)
	for i := 1; i <= 3; i++ {
		srv.InjectDM("701", user, fmt.Sprintf("missed %d", i))
	}
	end()
	for i := 1; i <= 3; i++ {
		expectText(t, e, fmt.Sprintf("missed %d", i))
	}
	e.sink.ExpectNone(t, time.Second)

	calls := listCalls(srv, "701")
	if len(calls) != 1 {
		t.Fatalf("%d reads of the DM; want 1: %+v", len(calls), calls)
	}
	q, _ := url.ParseQuery(calls[0].Query)
	if q.Get("after") != before || q.Get("limit") != "50" {
		t.Errorf("read with %q; want after=%s (the last message seen) and limit=50", calls[0].Query, before)
	}
	kinds := 0
	for _, o := range srv.Ops() {
		if o.Op == discordtest.OpResume && !o.Resumed {
			kinds++
		}
	}
	if kinds == 0 {
		t.Errorf("no refused RESUME: the outage was not the unresumable kind")
	}
	// The new session goes on as usual, and what was read is not delivered again.
	srv.InjectDM("701", user, "after")
	expectText(t, e, "after")
	e.sink.ExpectNone(t, 500*time.Millisecond)
}

func TestSessionTimeoutReadsMissedDMs(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	srv.InjectDM("705", user, "before")
	expectText(t, e, "before")
	srv.RefuseGateway(true)
	srv.EndSessions(4009, "Session timed out.")
	waitFor(t, "the loss reported", func() bool {
		h := e.sink.Connections()
		return len(h) > 0 && !h[len(h)-1].Up
	})
	srv.InjectDM("705", user, "missed")
	srv.RefuseGateway(false)
	expectText(t, e, "missed")
	e.sink.ExpectNone(t, time.Second)
	if n := len(opsOf(srv, discordtest.OpIdentify)); n != 2 {
		t.Errorf("%d IDENTIFY; want 2 (a timed-out session cannot be resumed)", n)
	}
}

func TestResumedReconnectReadsNothing(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	srv.InjectDM("711", user, "before")
	expectText(t, e, "before")

	end := outage(t, e, true)
	srv.InjectDM("711", user, "missed 1")
	srv.InjectDM("711", user, "missed 2")
	end()
	expectText(t, e, "missed 1") // replayed by the fake on RESUME, as Discord does
	expectText(t, e, "missed 2")
	e.sink.ExpectNone(t, time.Second)
	if calls := listCalls(srv, "711"); len(calls) != 0 {
		t.Errorf("a resumed session read the chat over REST: %+v", calls)
	}
	resumed := false
	for _, o := range srv.Ops() {
		resumed = resumed || (o.Op == discordtest.OpResume && o.Resumed)
	}
	if !resumed {
		t.Errorf("the session was not resumed")
	}
}

func TestUnresumedReconnectKeepsTheMentionGateInThreads(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	const other = "1002"
	access := defaultAccess()
	access.AllowFrom = append(access.AllowFrom, other)
	e := start(t, srv, discord.Config{Access: access})
	srv.InjectThread("801", "802", user, "start", true)
	if m := e.sink.Next(t); m.ThreadID != "802" || !strings.Contains(m.Text(), "start") {
		t.Fatalf("first = %q in thread %q", m.Text(), m.ThreadID)
	}

	end := outage(t, e, false)
	srv.InjectThread("801", "802", other, "chatter between people", false)
	srv.InjectThread("801", "802", other, "a question for the bot", true)
	srv.InjectThread("801", "802", user, "an aside", false)
	end()
	m := e.sink.Next(t)
	if m.ChatID != "801" || m.ThreadID != "802" || m.UserID != other || !strings.Contains(m.Text(), "a question for the bot") {
		t.Fatalf("delivered %q from %s in %s/%s; want the mention from %s in 801/802", m.Text(), m.UserID, m.ChatID, m.ThreadID, other)
	}
	if !m.Mentioned || m.ChatType != channels.ChatGroup {
		t.Errorf("mentioned=%v chat type=%v; want a mention in a group", m.Mentioned, m.ChatType)
	}
	e.sink.ExpectNone(t, time.Second)
	if n := len(listCalls(srv, "802")); n != 1 {
		t.Errorf("%d reads of the thread; want 1", n)
	}
}

func TestCatchUpIsBounded(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	e := start(t, srv, discord.Config{Access: defaultAccess()})
	srv.InjectDM("721", user, "before")
	expectText(t, e, "before")

	end := outage(t, e, false)
	var newest string
	for i := range 200 {
		newest = srv.InjectDM("721", user, fmt.Sprintf("m%03d", i))
	}
	end()
	for i := range 100 {
		expectText(t, e, fmt.Sprintf("m%03d", i))
	}
	e.sink.ExpectNone(t, time.Second)
	pages := 0
	for _, c := range listCalls(srv, "721") {
		if q, _ := url.ParseQuery(c.Query); q.Get("after") != "" {
			pages++
		}
	}
	if pages != 2 {
		t.Errorf("%d pages read in the DM; want 2 (the bound)", pages)
	}
	if !strings.Contains(e.logs.String(), "skipped") {
		t.Errorf("no log line says that messages were skipped:\n%s", e.logs.String())
	}

	// The skipped messages stay skipped: the next lost session reads after the newest.
	calls := len(listCalls(srv, "721"))
	outage(t, e, false)()
	waitFor(t, "another read of the DM", func() bool { return len(listCalls(srv, "721")) > calls })
	last := listCalls(srv, "721")[calls]
	if q, _ := url.ParseQuery(last.Query); q.Get("after") != newest {
		t.Errorf("read with %q after the second outage; want after=%s (the newest message)", last.Query, newest)
	}
	e.sink.ExpectNone(t, time.Second)
}
