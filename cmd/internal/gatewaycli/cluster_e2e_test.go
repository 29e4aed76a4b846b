package gatewaycli

// End-to-end tests of cluster mode (issue 16): three `gateway run` processes (this test
// binary re-executed, see TestMain) share one Postgres (cluster/pgtest) and one NATS
// (cluster/natstest), with the fake Telegram, the fake Slack (Events API over HTTP) and the
// fake model on 127.0.0.1. A small chatLoad balancer stands in front of the processes for the
// platforms' webhooks, as it would in a deployment.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

func newBalancer(t *testing.T) *balancer {
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
	t     *testing.T
	pg    *pgtest.Server
	pgURL string
	nats  string
	oai   *openaitest.Server
	delay atomic.Int64 // the model's delay before answering, in ns
	slow  sync.Map     // prompt → remaining slow answers (a minute each)
	tg    *telegramtest.Server
	sl    *slacktest.Server
	lb    *balancer
	mode  string // telegram: polling or webhook
	procs []*child
}

func newClusterRig(t *testing.T, mode string) *clusterRig {
	r := &clusterRig{t: t, mode: mode}
	r.pg = pgtest.New(t)
	r.pgURL = r.pg.URL("postgres")
	r.nats = natstest.Start(t)
	r.oai = openaitest.NewServer()
	t.Cleanup(r.oai.Close)
	r.oai.SetFunc(func(req openaitest.Request) openaitest.Reply {
		prompt := lastUser(req)
		rep := openaitest.Reply{Text: "re: " + prompt, Delay: time.Duration(r.delay.Load())}
		if v, ok := r.slow.Load(prompt); ok && v.(*atomic.Int64).Add(-1) >= 0 {
			rep.Delay = time.Minute
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
		writeChildConfig(r.t, root, addr, r.oai.URL(), tg+sl+fmt.Sprintf("cluster:\n  nats_url: %s\n  postgres_url: %s\n", r.nats, r.pgURL))
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

// answered reports how many of the load's chats have all their answers.
func (r *clusterRig) answered(l chatLoad, prefix []string) (done, total int) {
	for _, c := range l.tgChats {
		if len(r.telegramAnswers(c)) >= len(prefix)+l.n {
			done++
		}
	}
	for _, c := range l.slChats {
		if len(r.slackAnswers(c)) >= len(prefix)+l.n {
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
		done, total := r.answered(l, nil)
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
func (c *child) clusterStatus(t *testing.T) cluster.NodeStatus {
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

// Three processes, 200 Telegram chats (webhook, through the balancer) and 200 Slack chats
// (Events API) × 5 messages sent as fast as the platforms deliver: every message answered
// exactly once, each chat's answers in order; the partitions are shared by the three.
func TestClusterThreeProcessesAnswerEveryMessageOnceInOrder(t *testing.T) {
	r := newClusterRig(t, "webhook")
	r.start(3)
	l := chatLoad{tgChats: tgChats(1000, 200), slChats: slChats(1, 200), n: 5, tag: "w"}
	for i := 1; i <= l.n; i++ {
		r.send(l, i)
	}
	r.waitAnswered(l, 4*time.Minute, nil)
	total := 0
	for i, p := range r.procs {
		st := p.clusterStatus(t)
		if len(st.Held) == 0 || !st.Healthy {
			t.Errorf("process %d holds no partition or is unhealthy: %+v", i, st)
		}
		total += len(st.Held)
	}
	if total != 64 {
		t.Errorf("the three processes hold %d partitions together; want all 64", total)
		r.dumpLeases()
	}
	if n := len(r.oai.Requests()); n != 2000 {
		t.Errorf("model calls = %d; want one per message, 2000", n)
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


// dumpLeases logs who holds each lease, for a failure.
func (r *clusterRig) dumpLeases() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := nats.Connect(r.nats)
	if err != nil {
		r.t.Log(err)
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, "GATEWAY_LEASES")
	if err != nil {
		r.t.Log(err)
		return
	}
	keys, _ := kv.Keys(ctx)
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if err == nil {
			r.t.Logf("lease %s: %s", k, e.Value())
		}
	}
	for i, p := range r.procs {
		r.t.Logf("process %d: %+v", i, p.clusterStatus(r.t))
	}
}
