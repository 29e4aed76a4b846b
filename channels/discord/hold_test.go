package discord_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gateway/channels"
	"gateway/channels/channeltest"
	"gateway/channels/discord"
	"gateway/channels/discord/discordtest"
	"gateway/internal/secret"
	"gateway/state"
)

func openState(t *testing.T) *state.DB {
	t.Helper()
	db, err := state.Open(filepath.Join(t.TempDir(), "state"), state.Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// proc is one gateway process's Discord adapter.
type proc struct {
	ch   *discord.Channel
	sink *channeltest.Sink
	logs *channeltest.LogBuffer
}

// startProc runs an adapter for srv's first bot with opts (Logger and StateDir set here).
func startProc(t *testing.T, srv *discordtest.Server, opts discord.Options) proc {
	t.Helper()
	logs := &channeltest.LogBuffer{}
	opts.Logger, opts.StateDir = logs.Logger(), t.TempDir()
	ch, err := discord.New(discord.Config{Token: secret.Secret(srv.Bot().Token), APIURL: srv.URL, Access: defaultAccess()}, opts)
	if err != nil {
		t.Fatal(err)
	}
	p := proc{ch: ch, sink: channeltest.NewSink(), logs: logs}
	channeltest.Start(t, ch, p.sink)
	return p
}

func (p proc) stop(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.ch.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// neverDown fails if p ever reported its connection lost.
func neverDown(t *testing.T, who string, p proc) {
	t.Helper()
	for _, c := range p.sink.Connections() {
		if !c.Up {
			t.Errorf("%s reported itself disconnected (%v): a process without the connection still sends", who, c.Err)
		}
	}
}

// In cluster mode two processes run the same bot: only the holder has a gateway session,
// the other sends and stays ready; when the hold moves the session moves with it, what was
// posted while nobody held it is read by the next holder, and every message is delivered
// once in all.
func TestOnlyTheHolderConnectsAndTheHoldMoves(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	db := openState(t)
	h := channeltest.NewHolds()
	a := startProc(t, srv, discord.Options{Holder: h.As("a"), State: db})
	waitFor(t, "a to hold and connect", func() bool { return h.Owner() == "a" && srv.Connected() == 1 })
	b := startProc(t, srv, discord.Options{Holder: h.As("b"), State: db}) // Start returns without the hold
	waitFor(t, "b to wait for the hold", func() bool { return h.Waiting("b") })
	if !b.sink.WasConnected(discord.Name) {
		t.Errorf("b did not report itself ready: it can send")
	}

	var all []string
	post := func(text string) { srv.InjectDM("701", user, text) }
	got := func(p proc, text string) {
		t.Helper()
		m := p.sink.Next(t)
		if m.Text() != text {
			t.Fatalf("delivered %q; want %q\na:\n%s\nb:\n%s", m.Text(), text, a.logs.String(), b.logs.String())
		}
		all = append(all, m.Text())
	}

	post("m1")
	got(a, "m1")
	b.sink.ExpectNone(t, 300*time.Millisecond)
	if n := srv.Connected(); n != 1 {
		t.Fatalf("%d gateway sessions live; want 1, the holder's", n)
	}
	if n := len(opsOf(srv, discordtest.OpIdentify)); n != 1 {
		t.Fatalf("%d IDENTIFY; want 1: only the holder connects", n)
	}

	// The process without the connection sends.
	if err := answer(t, b.ch, channels.Target{Channel: discord.Name, ChatID: "701"}, channels.Frame{Type: channels.FrameDone, Text: "from b"}); err != nil {
		t.Fatal(err)
	}
	if msgs := srv.PostedBy(srv.Bot().ID, "701"); len(msgs) == 0 || msgs[len(msgs)-1].Content != "from b" {
		t.Fatalf("the process without the connection did not send: %+v", msgs)
	}
	waitFor(t, "b's log to say the connection is held elsewhere", func() bool {
		return strings.Contains(b.logs.String(), "held elsewhere; this process still sends")
	})

	// a loses the hold and nobody gets it for a while: a's session closes at once, and what
	// is posted meanwhile is read by b once it holds.
	h.Pause(true)
	h.Lose("a")
	waitFor(t, "a's session to close", func() bool { return srv.Connected() == 0 })
	post("m2 while nobody holds")
	post("m3 while nobody holds")
	waitFor(t, "a to ask for the hold again", func() bool { return h.AskedBy("a") > 1 })
	h.Pause(false)
	waitFor(t, "b to hold", func() bool { return h.Owner() == "b" })
	got(b, "m2 while nobody holds")
	got(b, "m3 while nobody holds")
	post("m4")
	got(b, "m4")
	a.sink.ExpectNone(t, 300*time.Millisecond)
	if n := srv.Connected(); n != 1 {
		t.Fatalf("%d gateway sessions live; want 1, the holder's", n)
	}

	// And back: b gives it up while a waits; a reads nothing twice. The hand-over waits
	// until b asks again, as a released lease is free only once its holder stored its
	// cursors. (A lease lost and taken at once may have up to b's last second read again:
	// the cluster's shared dedup window drops those.)
	h.Pause(true)
	h.Lose("b")
	waitFor(t, "b to ask for the hold again", func() bool { return h.AskedBy("b") > 1 })
	h.Pause(false)
	waitFor(t, "a to hold again", func() bool { return h.Owner() == "a" })
	waitFor(t, "a to connect again", func() bool { return strings.Count(a.logs.String(), "discord: connected") == 2 })
	post("m5")
	got(a, "m5")
	a.sink.ExpectNone(t, 500*time.Millisecond)
	b.sink.ExpectNone(t, 300*time.Millisecond)
	if n := srv.Connected(); n != 1 {
		t.Fatalf("%d gateway sessions live; want 1", n)
	}

	want := []string{"m1", "m2 while nobody holds", "m3 while nobody holds", "m4", "m5"}
	if !slices.Equal(all, want) {
		t.Fatalf("delivered %q; want each message once, in order: %q", all, want)
	}
	neverDown(t, "a", a)
	neverDown(t, "b", b)
	la, lb := a.logs.String(), b.logs.String()
	if here, away := strings.Count(la, "gateway connection here"), strings.Count(la, "held elsewhere"); here != 2 || away != 1 {
		t.Errorf("a's log tells here/elsewhere %d/%d times; want 2/1 (once per change):\n%s", here, away, la)
	}
	if here, away := strings.Count(lb, "gateway connection here"), strings.Count(lb, "held elsewhere"); here != 1 || away != 2 {
		t.Errorf("b's log tells here/elsewhere %d/%d times; want 1/2:\n%s", here, away, lb)
	}
}

// A restarted process reads what was posted while it was down, from the cursors in State;
// what it had already taken is not delivered again.
func TestRestartCatchesUpFromState(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	db := openState(t)
	first := startProc(t, srv, discord.Options{State: db})
	srv.InjectDM("702", user, "before")
	expectNext(t, first.sink, "before")
	first.stop(t)

	srv.InjectDM("702", user, "while down 1")
	srv.InjectDM("702", user, "while down 2")
	second := startProc(t, srv, discord.Options{State: db})
	expectNext(t, second.sink, "while down 1")
	expectNext(t, second.sink, "while down 2")
	srv.InjectDM("702", user, "after")
	expectNext(t, second.sink, "after")
	second.sink.ExpectNone(t, 500*time.Millisecond)
}

// Without State a restart knows no cursors: nothing is read back (as before).
func TestRestartWithoutStateReadsNothing(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	first := startProc(t, srv, discord.Options{})
	srv.InjectDM("703", user, "before")
	expectNext(t, first.sink, "before")
	first.stop(t)
	srv.InjectDM("703", user, "while down")
	second := startProc(t, srv, discord.Options{})
	srv.InjectDM("703", user, "after")
	expectNext(t, second.sink, "after")
	second.sink.ExpectNone(t, 500*time.Millisecond)
	if n := len(listCalls(srv, "703")); n != 0 {
		t.Fatalf("%d reads of the DM's history; want none without State", n)
	}
}

// The holder opens its session with the usual retries while the gateway refuses it, and
// connects once it is back; meanwhile it reports the connection down, as after a loss.
func TestHolderRetriesTheGateway(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	srv.RefuseGateway(true)
	h := channeltest.NewHolds()
	p := startProc(t, srv, discord.Options{Holder: h.As("a")})
	waitFor(t, "two failed attempts", func() bool { return strings.Count(p.logs.String(), "discord: reconnect failed") >= 2 })
	if n := srv.Connected(); n != 0 {
		t.Fatalf("%d sessions while the gateway refuses", n)
	}
	if c := p.sink.Connections(); len(c) != 2 || !c[0].Up || c[1].Up || c[1].Err == nil {
		t.Fatalf("reported %+v; want ready at start (it can send), then down with the reason", c)
	}
	srv.RefuseGateway(false)
	waitFor(t, "the session", func() bool { return srv.Connected() == 1 })
	srv.InjectDM("704", user, "hello")
	expectNext(t, p.sink, "hello")
	if c := p.sink.Connections(); !c[len(c)-1].Up {
		t.Fatalf("reported %+v; want up once connected", c)
	}
}

func expectNext(t *testing.T, sink *channeltest.Sink, want string) {
	t.Helper()
	if got := sink.Next(t).Text(); got != want {
		t.Fatalf("delivered %q; want %q", got, want)
	}
}

// Only the holder receives an application command; the answer may come from another
// process (the one running the chat), and it still replaces the deferred response.
func TestAnotherProcessAnswersTheHoldersInteraction(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	db := openState(t)
	h := channeltest.NewHolds()
	a := startProc(t, srv, discord.Options{Holder: h.As("a"), State: db})
	waitFor(t, "a to hold and connect", func() bool { return h.Owner() == "a" && srv.Connected() == 1 })
	b := startProc(t, srv, discord.Options{Holder: h.As("b"), State: db})
	waitFor(t, "b to wait for the hold", func() bool { return h.Waiting("b") })

	id := srv.InjectCommand("706", user, "status", "", false)
	m := a.sink.Next(t)
	if m.Text() != "/status" {
		t.Fatalf("delivered %q; want the command", m.Text())
	}
	b.sink.ExpectNone(t, 300*time.Millisecond)
	if r := srv.Interaction(id); r.Type != 5 {
		t.Fatalf("the interaction was answered with type %d; want 5 (deferred)", r.Type)
	}
	if err := answer(t, b.ch, channels.TargetOf(m), channels.Frame{Type: channels.FrameDone, Text: "all good"}); err != nil {
		t.Fatal(err)
	}
	if r := srv.Interaction(id); !slices.Equal(r.Edits, []string{"all good"}) {
		t.Fatalf("the deferred response was edited %q; want the answer from b once", r.Edits)
	}
	if msgs := srv.PostedBy(srv.Bot().ID, "706"); len(msgs) != 0 {
		t.Fatalf("the answer was posted as a message too: %+v", msgs)
	}
}

// A holder that cannot connect reports the connection down; once the hold goes elsewhere
// it is ready again, since it still sends.
func TestReadyAgainWhenTheHoldGoes(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	srv.RefuseGateway(true)
	h := channeltest.NewHolds()
	p := startProc(t, srv, discord.Options{Holder: h.As("a")})
	waitFor(t, "the holder to report the connection down", func() bool {
		c := p.sink.Connections()
		return len(c) > 0 && !c[len(c)-1].Up
	})
	waitFor(t, "a second attempt", func() bool { return strings.Count(p.logs.String(), "discord: reconnect failed") >= 2 })
	h.Pause(true)
	h.Lose("a")
	waitFor(t, "the process to report itself ready again", func() bool {
		c := p.sink.Connections()
		return c[len(c)-1].Up
	})
	waitFor(t, "it to ask for the hold again", func() bool { return h.AskedBy("a") > 1 })
	if n := srv.Connected(); n != 0 {
		t.Fatalf("%d sessions", n)
	}
}

// gate is the gateway side of an adapter that refuses messages while shut is set, as a
// gateway that is stopping with no journal does, and counts the refusals.
type gate struct {
	*channeltest.Sink
	shut    atomic.Bool
	refused atomic.Int32
}

func (g *gate) Deliver(ctx context.Context, m *channels.Message) error {
	if g.shut.Load() {
		g.refused.Add(1)
		return channels.ErrStopping
	}
	return g.Sink.Deliver(ctx, m)
}

// A message the gateway refused (it was shutting down) does not move the chat's catch-up
// cursor: Discord never sends it again, so the next process reads it back from the DM's
// history and it is delivered then, once; what was taken before is not read again.
func TestRefusedMessageIsReadBackAfterRestart(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	db := openState(t)
	logs := &channeltest.LogBuffer{}
	ch, err := discord.New(discord.Config{Token: secret.Secret(srv.Bot().Token), APIURL: srv.URL, Access: defaultAccess()},
		discord.Options{Logger: logs.Logger(), StateDir: t.TempDir(), State: db})
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{Sink: channeltest.NewSink()}
	channeltest.Start(t, ch, g)
	srv.InjectDM("706", user, "taken")
	expectNext(t, g.Sink, "taken")
	g.shut.Store(true)
	srv.InjectDM("706", user, "sent while stopping")
	waitFor(t, "the refusal", func() bool { return g.refused.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ch.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	second := startProc(t, srv, discord.Options{State: db})
	expectNext(t, second.sink, "sent while stopping")
	second.sink.ExpectNone(t, time.Second)
	if n := g.refused.Load(); n != 1 {
		t.Fatalf("%d refusals; want the one before the restart (and the message delivered after it, a second attempt)", n)
	}
}

// A process restarted after a crash (a new adapter on the same state) answers the slash
// command its last run had deferred in the deferred response, replacing "thinking…", not
// as a message beside a response left thinking until Discord gives up on it.
func TestRestartedProcessAnswersItsDeferredInteraction(t *testing.T) {
	t.Parallel()
	srv := discordtest.New(t)
	db := openState(t)
	a := startProc(t, srv, discord.Options{State: db})
	id := srv.InjectCommand("707", user, "status", "", false)
	m := a.sink.Next(t)
	if r := srv.Interaction(id); r.Type != 5 {
		t.Fatalf("the interaction was answered with type %d; want 5 (deferred)", r.Type)
	}
	a.stop(t)
	b := startProc(t, srv, discord.Options{State: db})
	if err := answer(t, b.ch, channels.TargetOf(m), channels.Frame{Type: channels.FrameDone, Text: "all good"}); err != nil {
		t.Fatal(err)
	}
	if r := srv.Interaction(id); !slices.Equal(r.Edits, []string{"all good"}) {
		t.Fatalf("the deferred response was edited %q; want the answer after the restart once", r.Edits)
	}
	if msgs := srv.PostedBy(srv.Bot().ID, "707"); len(msgs) != 0 {
		t.Fatalf("the answer was posted as a message too: %+v", msgs)
	}
}
