package gatewaycli

// End-to-end tests of cluster mode (issue 16): three `gateway run` processes (this test
// binary re-executed, see TestMain) share one Postgres (cluster/pgtest) and one NATS
// (cluster/natstest, as its own process: under -race its code stays outside this binary's
// race detector), with the fake Telegram, the fake Slack (Events API over HTTP) and the
// fake model on 127.0.0.1. A small chatLoad balancer stands in front of the processes for the
// platforms' webhooks, as it would in a deployment.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"gateway/channels/slack/slacktest"
	"gateway/channels/telegram/telegramtest"
	"gateway/cluster"
	"gateway/cluster/natstest"
	"gateway/cluster/pgtest"
	"gateway/harness/openaitest"
)

// balancer spreads requests over the live processes, round robin; a process taken out
// (killed) gets none, as a load balancer's health check would see to.
type balancer struct {
	srv  *httptest.Server
	mu   sync.Mutex
	live []string
	next int
}

func newBalancer(t testing.TB) *balancer {
	b := &balancer{}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: b.pick()})
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) { w.WriteHeader(http.StatusBadGateway) },
	}
	b.srv = httptest.NewServer(rp)
	t.Cleanup(b.srv.Close)
	return b
}

func (b *balancer) pick() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.live) == 0 {
		return "127.0.0.1:1"
	}
	b.next = (b.next + 1) % len(b.live)
	return b.live[b.next]
}

func (b *balancer) set(addrs ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.live = addrs
}

// clusterRig is a cluster under test: its engines, fakes and processes.
type clusterRig struct {
	t     testing.TB
	pg    *pgtest.Server
	pgURL string
	nats  *natstest.Process
	oai   *openaitest.Server
	delay atomic.Int64 // the model's delay before answering, in ns
	slow  sync.Map     // prompt → remaining slow answers (a minute each)
	cut   sync.Map     // prompt → remaining answers that stream a start and hang
	tg    *telegramtest.Server
	sl    *slacktest.Server
	lb    *balancer
	mode  string // telegram: polling or webhook
	procs []*child
}

func newClusterRig(t testing.TB, mode string) *clusterRig {
	r := &clusterRig{t: t, mode: mode}
	r.pg = pgtest.New(t)
	r.pgURL = r.pg.URL("postgres")
	r.nats = natstest.NewProcess(t)
	r.oai = openaitest.NewServer()
	t.Cleanup(r.oai.Close)
	r.oai.SetFunc(func(req openaitest.Request) openaitest.Reply {
		prompt := lastUser(req)
		rep := openaitest.Reply{Text: "re: " + prompt, Delay: time.Duration(r.delay.Load())}
		if v, ok := r.slow.Load(prompt); ok && v.(*atomic.Int64).Add(-1) >= 0 {
			rep.Delay = time.Minute
		}
		if v, ok := r.cut.Load(prompt); ok && v.(*atomic.Int64).Add(-1) >= 0 {
			// A preview is only sent when a slot of the shared budget is free at once:
			// chunks keep coming for a while, so that one of them shows.
			rep = openaitest.Reply{Chunks: slices.Repeat([]string{"The cut start. "}, 20), ChunkDelay: 250 * time.Millisecond, Hang: true}
		}
		return rep
	})
	r.tg = telegramtest.NewServer(t)
	r.sl = slacktest.New(t)
	r.lb = newBalancer(t)
	r.sl.DeliverTo(r.lb.srv.URL + "/slack/events")
	return r
}

// start starts n more processes and waits until each is ready.
func (r *clusterRig) start(n int) {
	for range n {
		root, addr := r.t.TempDir(), freePort(r.t)
		tg := fmt.Sprintf("  telegram:\n    enabled: true\n    token: %q\n    api_url: %s\n    allow_from: [%q]\n",
			telegramtest.Token, r.tg.URL, fmt.Sprint(telegramtest.UserID))
		if r.mode == "webhook" {
			tg += fmt.Sprintf("    mode: webhook\n    webhook_url: %s/telegram/webhook\n    webhook_secret: hook-secret-0123456789\n", r.lb.srv.URL)
		}
		sl := fmt.Sprintf("  slack:\n    enabled: true\n    mode: events\n    bot_token: %q\n    signing_secret: %q\n    api_url: %s\n    allow_from: [%q]\n",
			slacktest.BotToken, slacktest.SigningSecret, r.sl.APIURL(), slackUser)
		writeChildConfig(r.t, root, addr, r.oai.URL(), tg+sl+fmt.Sprintf("cluster:\n  nats_url: %s\n  postgres_url: %s\n", r.nats.URL(), r.pgURL))
		r.procs = append(r.procs, startChild(r.t, root, addr))
		r.balance()
	}
}

// balance points the load balancer at the processes still running.
func (r *clusterRig) balance() {
	var live []string
	for _, p := range r.procs {
		select {
		case <-p.done:
		default:
			live = append(live, p.addr)
		}
	}
	r.lb.set(live...)
}

// logs is every process's log, for failure messages.
func (r *clusterRig) logs() fmt.Stringer {
	var b strings.Builder
	for i, p := range r.procs {
		fmt.Fprintf(&b, "--- process %d (%s) ---\n%s\n", i, p.addr, p.log)
	}
	return stringer(b.String())
}

type stringer string

func (s stringer) String() string { return string(s) }

// chatLoad is a set of chats each sent the same numbered messages.
type chatLoad struct {
	tgChats []int64
	slChats []string
	n       int
	tag     string
}

// send sends message i of every chat (i from 1).
func (r *clusterRig) send(l chatLoad, i int) {
	for _, c := range l.tgChats {
		r.tg.Send(telegramtest.Update{ChatID: c, Text: fmt.Sprintf("%s-%d-m%d", l.tag, c, i)})
	}
	// Slack posts events concurrently and promises no order between them: a person's next
	// message follows the previous one, so message i+1 goes once Slack saw i acknowledged.
	acked := func() int {
		n := 0
		for _, d := range r.sl.Deliveries() {
			if d.Status == http.StatusOK {
				n++
			}
		}
		return n
	}
	want := acked() + len(l.slChats)
	for _, c := range l.slChats {
		r.sl.DM(c, slackUser, fmt.Sprintf("%s-%s-m%d", l.tag, c, i))
	}
	waitFor(r.t, "Slack sees its events acknowledged", func() bool { return acked() >= want }, r.logs())
}

func (r *clusterRig) want(l chatLoad, chat string) []string {
	out := make([]string, l.n)
	for i := range l.n {
		out[i] = fmt.Sprintf("re: %s-%s-m%d", l.tag, chat, i+1)
	}
	return out
}

func (r *clusterRig) telegramAnswers(chat int64) []string {
	var out []string
	for _, m := range r.tg.Messages(chat) {
		out = append(out, m.Text)
	}
	return out
}

func (r *clusterRig) slackAnswers(chat string) []string {
	var out []string
	for _, p := range r.sl.Posted(chat) {
		out = append(out, p.Text)
	}
	return out
}

// answered reports how many of the load's chats have all their answers (after those
// they had before).
func (r *clusterRig) answered(l chatLoad, before map[string][]string) (done, total int) {
	for _, c := range l.tgChats {
		if len(r.telegramAnswers(c)) >= len(before[fmt.Sprint(c)])+l.n {
			done++
		}
	}
	for _, c := range l.slChats {
		if len(r.slackAnswers(c)) >= len(before[c])+l.n {
			done++
		}
	}
	return done, len(l.tgChats) + len(l.slChats)
}

// waitAnswered waits until every chat of the load has its answers, then checks each chat
// got exactly those answers, once each, in order (after what it had before, if given).
func (r *clusterRig) waitAnswered(l chatLoad, within time.Duration, before map[string][]string) {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for {
		done, total := r.answered(l, before)
		if done == total {
			break
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: %d of %d chats have all their answers after %s; logs:\n%s", l.tag, done, total, within, r.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	quiet() // a second answer would show up now
	check := func(chat string, got []string) {
		want := append(append([]string(nil), before[chat]...), r.want(l, chat)...)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			r.t.Errorf("chat %s: answers\n%q\nwant exactly, in order\n%q", chat, got, want)
		}
	}
	for _, c := range l.tgChats {
		check(fmt.Sprint(c), r.telegramAnswers(c))
	}
	for _, c := range l.slChats {
		check(c, r.slackAnswers(c))
	}
}

func tgChats(from, n int) []int64 {
	out := make([]int64, n)
	for i := range n {
		out[i] = int64(from + i)
	}
	return out
}

func slChats(from, n int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = fmt.Sprintf("D%07d", from+i)
	}
	return out
}

// status is a process's /api/v1/status cluster part.
func (c *child) clusterStatus(t testing.TB) cluster.NodeStatus {
	resp, err := http.Get("http://" + c.addr + "/api/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var st struct {
		Cluster cluster.NodeStatus `json:"cluster"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("status: %v: %s", err, body)
	}
	return st.Cluster
}

// Three processes, 200 Telegram chats (webhook, through the balancer) and 30 Slack chats
// (Events API; Slack's pace of 10 calls a second makes more slow to test) × 5 messages sent as fast as the platforms deliver: every message answered
// exactly once, each chat's answers in order; the partitions are shared by the three.
func TestClusterThreeProcessesAnswerEveryMessageOnceInOrder(t *testing.T) {
	r := newClusterRig(t, "webhook")
	r.start(3)
	l := chatLoad{tgChats: tgChats(1000, 200), slChats: slChats(1, 30), n: 5, tag: "w"}
	for i := 1; i <= l.n; i++ {
		r.send(l, i)
	}
	r.waitAnswered(l, 4*time.Minute, nil)
	// The partitions end up shared: each process holds some, all are held, none twice.
	r.waitBalanced()
	if n, want := len(r.oai.Requests()), 5*230; n != want {
		t.Errorf("model calls = %d; want one per message, %d", n, want)
	}
	resp, err := http.Get("http://" + r.procs[0].addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"gateway_cluster_partitions_held", "gateway_cluster_partition_lag{", "gateway_cluster_up 1"} {
		if !strings.Contains(string(metrics), m) {
			t.Errorf("/metrics has no %s", m)
		}
	}

	// The admin API reaches a chat through any process: an inject sent to a process that
	// does not answer the chat is run by the one that does, and waits for its delivery.
	part := cluster.Partition("telegram:1001", 64)
	var other *child
	for _, p := range r.procs {
		holds := false
		for _, h := range p.clusterStatus(t).Held {
			holds = holds || h.Partition == part
		}
		if !holds {
			other = p
		}
	}
	body := `{"channel":"telegram","chat_id":"1001","text":"injected elsewhere","trigger":true,"wait":"delivered"}`
	resp, err = (&http.Client{Timeout: time.Minute}).Post("http://"+other.addr+"/api/v1/inject", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("inject: %v; logs:\n%s", err, r.logs())
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(out), `"delivered"`) {
		t.Fatalf("inject through a process that does not hold the chat: %d %s", resp.StatusCode, out)
	}
	waitFor(t, "the injected message is answered", func() bool { return len(r.telegramAnswers(1001)) == 6 }, r.logs())
	if got := r.telegramAnswers(1001); got[5] != "re: injected elsewhere" {
		t.Fatalf("after the inject chat 1001 has %q", got)
	}

	// A platform's redelivery of an answered message is not answered again, whichever
	// process it reaches.
	id, _ := r.tg.Send(telegramtest.Update{ChatID: 1000, Text: "once"})
	waitFor(t, "the extra message is answered", func() bool { return len(r.telegramAnswers(1000)) == 6 }, r.logs())
	for range 3 {
		r.tg.Redeliver(id)
	}
	quiet()
	if got := r.telegramAnswers(1000); len(got) != 6 {
		t.Fatalf("a redelivered update was answered again: %q", got)
	}
	for _, p := range r.procs {
		p.stop()
	}
}

// waitBalanced waits until every partition is held by exactly one process, each process
// holding some and none handing any over.
func (r *clusterRig) waitBalanced() {
	r.t.Helper()
	waitFor(r.t, "the partitions are shared by the processes", func() bool {
		held := map[int]int{}
		for _, p := range r.procs {
			st := p.clusterStatus(r.t)
			if len(st.Held) == 0 || !st.Healthy {
				return false
			}
			for _, h := range st.Held {
				if h.HandingOver {
					return false
				}
				held[h.Partition]++
			}
		}
		for p := range 64 {
			if held[p] != 1 {
				return false
			}
		}
		return true
	}, r.logs())
}

// leaseHolder is who holds a lease now ("" when nobody does).
func (r *clusterRig) leaseHolder(name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nc, err := nats.Connect(r.nats.URL())
	if err != nil {
		return ""
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return ""
	}
	kv, err := js.KeyValue(ctx, "GATEWAY_LEASES")
	if err != nil {
		return ""
	}
	e, err := kv.Get(ctx, name)
	if err != nil {
		return ""
	}
	return string(e.Value())
}

// modelAsked counts the model calls whose prompt was text.
func (r *clusterRig) modelAsked(text string) int {
	n := 0
	for _, req := range r.oai.Requests() {
		if lastUser(req) == text {
			n++
		}
	}
	return n
}

// SIGKILL of the process that polls Telegram, in the middle of a turn of a chat it holds:
// the polling lease moves to a survivor within 15 s, the killed turn's message is answered
// exactly once (by the survivor that takes the partition), and every chat goes on being
// answered, in order, by the two left.
func TestClusterSurvivesTheKillOfAProcessMidTurn(t *testing.T) {
	r := newClusterRig(t, "polling")
	r.start(3)
	before := chatLoad{tgChats: tgChats(2000, 60), n: 2, tag: "a"}
	for i := 1; i <= before.n; i++ {
		r.send(before, i)
	}
	r.waitAnswered(before, 2*time.Minute, nil)

	victim, victimName := r.poller()
	chat := heldChat(t, victim)
	var slowOnce atomic.Int64
	slowOnce.Store(1)
	r.slow.Store("mid-turn", &slowOnce)
	r.tg.Send(telegramtest.Update{ChatID: chat, Text: "mid-turn"})
	waitFor(t, "the model is asked by the poller", func() bool { return r.modelAsked("mid-turn") == 1 }, r.logs())
	victim.kill()
	killed := time.Now()
	r.balance()

	// The survivors go on: new messages, in old chats and new, keep being answered.
	after := chatLoad{tgChats: tgChats(2000, 60), n: 2, tag: "b"}
	for i := 1; i <= after.n; i++ {
		r.send(after, i)
	}
	waitFor(t, "a survivor polls", func() bool {
		h := r.leaseHolder(pollLease())
		return h != "" && h != victimName
	}, r.logs())
	if moved := time.Since(killed); moved > 15*time.Second {
		t.Errorf("the polling lease moved %s after the kill; want within 15s", moved.Round(time.Second))
	}
	prev := map[string][]string{}
	for _, c := range before.tgChats {
		prev[fmt.Sprint(c)] = r.want(before, fmt.Sprint(c))
	}
	r.waitAnswered(after, 2*time.Minute, prev)
	waitFor(t, "the killed turn's message is answered", func() bool { return len(r.telegramAnswers(chat)) > 0 }, r.logs())
	quiet()
	if got := r.telegramAnswers(chat); len(got) != 1 || got[0] != "re: mid-turn" {
		t.Fatalf("the message of the killed turn: answers %q; want exactly one", got)
	}
	if n := r.modelAsked("mid-turn"); n != 2 {
		t.Errorf("model calls for the killed turn's message = %d; want the killed one and one more", n)
	}
	for _, p := range r.procs {
		if p != victim {
			p.stop()
		}
	}
}

// pollLease is the name of the lease the process that polls Telegram holds.
func pollLease() string {
	return "conn.telegram." + strings.Split(telegramtest.Token, ":")[0]
}

// poller is the process that polls Telegram, and its holder name.
func (r *clusterRig) poller() (*child, string) {
	var poller *child
	var name string
	waitFor(r.t, "one process polls", func() bool {
		holder := r.leaseHolder(pollLease())
		for _, p := range r.procs {
			if st := p.clusterStatus(r.t); st.Holder == holder {
				poller, name = p, holder
				return true
			}
		}
		return false
	}, r.logs())
	return poller, name
}

// twoAndAChatOfTheOneNotPolling starts two processes and returns the one that does not
// poll Telegram, and a chat of a partition it holds: killing it, the test does not wait
// for the poll lease to move.
func (r *clusterRig) twoAndAChatOfTheOneNotPolling() (*child, int64) {
	r.start(2)
	r.waitBalanced()
	poller, _ := r.poller()
	p := r.procs[0]
	if p == poller {
		p = r.procs[1]
	}
	chat := heldChat(r.t, p)
	r.tg.AddChat(chat) // a user who started the bot: an inject may answer there before they write
	return p, chat
}

// heldChat is a Telegram chat of a partition p holds (and is not handing over).
func heldChat(t testing.TB, p *child) int64 {
	held := map[int]bool{}
	for _, h := range p.clusterStatus(t).Held {
		held[h.Partition] = !h.HandingOver
	}
	if !slices.Contains(slices.Collect(maps.Values(held)), true) {
		t.Fatal("the process holds no partition")
	}
	for c := int64(9000); ; c++ {
		if held[cluster.Partition(fmt.Sprintf("telegram:%d", c), 64)] {
			return c
		}
	}
}

// askedOnce fails t when a model request for prompt holds it as a user message more than
// once: an attempt cut by a crash, saved in the history, asked again beside the new one.
func (r *clusterRig) askedOnce(prompt string) {
	r.t.Helper()
	for _, req := range r.oai.Requests() {
		if lastUser(req) != prompt {
			continue
		}
		n := 0
		for _, m := range req.Messages {
			if m.Role == "user" && m.Content == prompt {
				n++
			}
		}
		if n != 1 {
			r.t.Errorf("a model request holds %q %d times; want once", prompt, n)
		}
	}
}

// pgCount is the count a query of the shared database returns.
func (r *clusterRig) pgCount(query string, args ...any) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.pgURL)
	if err != nil {
		r.t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, query, args...).Scan(&n); err != nil {
		r.t.Fatal(err)
	}
	return n
}

// historyHolds reports whether a chat's history in Postgres holds text.
func (r *clusterRig) historyHolds(text string) bool {
	return r.pgCount(`SELECT count(*) FROM gateway_session_log WHERE position($1::bytea in lines) > 0`, []byte(text)) > 0
}

// SIGKILL of the process answering a chat after the model's answer was saved in the
// chat's history (in Postgres) and while it is being sent: the process that takes the
// partition answers the message once, and asks the model the question once, as the first
// time, not twice with the cut answer between.
func TestClusterKilledAfterTheAnswerWasSavedAsksTheModelOnce(t *testing.T) {
	r := newClusterRig(t, "polling")
	victim, chat := r.twoAndAChatOfTheOneNotPolling()
	r.tg.Slow("sendMessage", time.Minute)
	r.tg.Send(telegramtest.Update{ChatID: chat, Text: "saved, then killed"})
	waitFor(t, "the answer saved in the history", func() bool { return r.historyHolds("re: saved, then killed") }, r.logs())
	victim.kill()
	r.tg.Slow("sendMessage", 0)
	r.balance()
	waitFor(t, "the message answered by the survivor", func() bool { return len(r.telegramAnswers(chat)) > 0 }, r.logs())
	quiet()
	if got := r.telegramAnswers(chat); len(got) != 1 || got[0] != "re: saved, then killed" {
		t.Fatalf("answers %q; want exactly one", got)
	}
	if n := r.modelAsked("saved, then killed"); n != 2 {
		t.Errorf("model calls for the message = %d; want the killed process's and one more", n)
	}
	r.askedOnce("saved, then killed")
	// The conversation goes on from the answer the chat got.
	r.tg.Send(telegramtest.Update{ChatID: chat, Text: "and then"})
	waitFor(t, "the next message answered", func() bool { return len(r.telegramAnswers(chat)) == 2 }, r.logs())
	r.askedOnce("saved, then killed")
	for _, p := range r.procs {
		if p != victim {
			p.stop()
		}
	}
}

// SIGKILL of the process answering a chat while its answer streams: the process that takes
// the partition finishes the answer in the message the cut one showed in, so the chat
// shows one answer, whole, not the cut start and then the answer again beside it.
func TestClusterKilledMidStreamFinishesTheAnswerInPlace(t *testing.T) {
	r := newClusterRig(t, "polling")
	victim, chat := r.twoAndAChatOfTheOneNotPolling()
	var once atomic.Int64
	once.Store(1)
	r.cut.Store("cut mid-stream", &once)
	r.tg.Send(telegramtest.Update{ChatID: chat, Text: "cut mid-stream"})
	waitFor(t, "the cut start shows", func() bool {
		got := r.tg.Messages(chat)
		return len(got) == 1 && strings.Contains(got[0].Text, "The cut start")
	}, r.logs())
	preview := r.tg.Messages(chat)[0]
	waitFor(t, "its place is kept", func() bool { return r.settingsHold("placement:") }, r.logs())
	victim.kill()
	r.balance()
	waitFor(t, "the answer finished by the survivor", func() bool {
		got := r.tg.Messages(chat)
		return len(got) > 0 && got[len(got)-1].Text == "re: cut mid-stream"
	}, r.logs())
	quiet()
	if got := r.tg.Messages(chat); len(got) != 1 || got[0].ID != preview.ID {
		t.Fatalf("the chat shows %+v; want one message, the answer in place of the cut start (message %d)", got, preview.ID)
	}
	r.askedOnce("cut mid-stream")
	waitFor(t, "the placement forgotten once answered", func() bool { return !r.settingsHold("placement:") }, r.logs())
	for _, p := range r.procs {
		if p != victim {
			p.stop()
		}
	}
}

// settingsHold reports whether a setting's name in Postgres starts with prefix.
func (r *clusterRig) settingsHold(prefix string) bool {
	return r.pgCount(`SELECT count(*) FROM gateway_settings WHERE starts_with(name, $1)`, prefix) > 0
}

// readyWatch polls every process's /readyz and records the reasons it was not ready.
type readyWatch struct {
	mu      sync.Mutex
	reasons map[string]bool
	stop    chan struct{}
	done    chan struct{}
}

func (r *clusterRig) watchReady() *readyWatch {
	w := &readyWatch{reasons: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		client := &http.Client{Timeout: 5 * time.Second}
		for {
			for _, p := range r.procs {
				resp, err := client.Get("http://" + p.addr + "/readyz")
				if err != nil {
					continue
				}
				var body struct {
					Reason string `json:"reason"`
				}
				_ = json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					w.mu.Lock()
					w.reasons[body.Reason] = true
					w.mu.Unlock()
				}
			}
			select {
			case <-w.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return w
}

// saw reports whether a not-ready reason contained what.
func (w *readyWatch) saw(what string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for r := range w.reasons {
		if strings.Contains(r, what) {
			return true
		}
	}
	return false
}

func (w *readyWatch) end() {
	close(w.stop)
	<-w.done
}

// Postgres, then NATS, restarted while messages keep coming: the processes report
// not-ready meanwhile, wait, and resume; every message is answered once, in order.
func TestClusterRidesOutARestartOfPostgresAndNATS(t *testing.T) {
	r := newClusterRig(t, "webhook")
	r.delay.Store(int64(200 * time.Millisecond))
	r.start(3)
	watch := r.watchReady()
	l := chatLoad{tgChats: tgChats(3000, 60), n: 6, tag: "r"}
	ctx := context.Background()
	for i := 1; i <= l.n; i++ {
		r.send(l, i)
		switch i {
		case 2:
			if err := r.pg.Restart(ctx, 3*time.Second); err != nil {
				t.Fatal(err)
			}
		case 4:
			r.nats.Restart(3 * time.Second)
		}
		time.Sleep(500 * time.Millisecond)
	}
	r.waitAnswered(l, 3*time.Minute, nil)
	watch.end()
	if !watch.saw("Postgres") {
		t.Errorf("no process reported not-ready while Postgres was down (reasons seen: %v)", watch.reasons)
	}
	if !watch.saw("NATS") {
		t.Errorf("no process reported not-ready while NATS was down (reasons seen: %v)", watch.reasons)
	}
	for _, p := range r.procs {
		p.stop()
	}
}

// BenchmarkClusterWebhook measures 1 against 3 processes: Telegram webhook through the
// balancer, the fake model answering after 200 ms, 200 chats. "burst": 5 messages per chat,
// a round of 200 a second, more than Telegram's 30 sends a second allow, so the shared
// budget sets the pace. "paced": 3 messages per chat at 15 a second in all, within it. It
// reports messages answered per second and the latency from a message's send to its
// answer's final text (p50, p99). Run it alone:
//
//	go test -run '^$' -bench ClusterWebhook -benchtime 1x -count 3 ./cmd/internal/gatewaycli/
func BenchmarkClusterWebhook(b *testing.B) {
	for _, load := range []struct {
		name      string
		n         int
		perSecond int // 0: each round at once, a round a second
	}{{"burst", 5, 0}, {"paced", 3, 15}} {
		for _, procs := range []int{1, 3} {
			b.Run(fmt.Sprintf("%s/processes=%d", load.name, procs), func(b *testing.B) {
				for range b.N {
					benchCluster(b, procs, load.n, load.perSecond)
				}
			})
		}
	}
}

func benchCluster(b *testing.B, procs, n, perSecond int) {
	r := newClusterRig(b, "webhook")
	r.delay.Store(int64(200 * time.Millisecond))
	r.start(procs)
	r.waitBalanced() // steady state: the hand-over as processes join is not measured
	l := chatLoad{tgChats: tgChats(5000, 200), n: n, tag: "b"}
	sent := map[string]time.Time{}
	start := time.Now()
	next := start
	for i := 1; i <= l.n; i++ {
		for _, c := range l.tgChats {
			if perSecond > 0 {
				time.Sleep(time.Until(next))
				next = next.Add(time.Second / time.Duration(perSecond))
			}
			sent[fmt.Sprintf("re: b-%d-m%d", c, i)] = time.Now()
			r.tg.Send(telegramtest.Update{ChatID: c, Text: fmt.Sprintf("b-%d-m%d", c, i)})
		}
		if perSecond == 0 {
			next = next.Add(time.Second)
			time.Sleep(time.Until(next))
		}
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if done, total := r.answered(l, nil); done == total {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("not all answered within 5 minutes")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var lat []time.Duration
	last := start
	for _, c := range l.tgChats {
		for _, m := range r.tg.Messages(c) {
			at := m.Time
			if m.Updated.After(at) {
				at = m.Updated
			}
			if s, ok := sent[m.Text]; ok {
				lat = append(lat, at.Sub(s))
			}
			if at.After(last) {
				last = at
			}
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(len(lat))/last.Sub(start).Seconds(), "msgs/s")
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "p99-ms")
	for _, p := range r.procs {
		p.stop()
	}
}
