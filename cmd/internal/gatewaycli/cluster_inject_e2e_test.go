package gatewaycli

// End-to-end tests of POST /api/v1/inject in cluster mode: the injected message is stored
// in the chat's partition of the shared intake before the API answers, so a SIGKILL of the
// process answering the chat does not lose it (see cluster_e2e_test.go for the rig).

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"gateway/channels/telegram/telegramtest"
	"gateway/cluster"
)

// inject posts an inject for a Telegram chat to process p and returns the status and body.
func (r *clusterRig) inject(p *child, chat int64, fields string) (int, string) {
	r.t.Helper()
	body := fmt.Sprintf(`{"channel":"telegram","chat_id":"%d",%s}`, chat, fields)
	resp, err := (&http.Client{Timeout: time.Minute}).Post("http://"+p.addr+"/api/v1/inject", "application/json", strings.NewReader(body))
	if err != nil {
		r.t.Fatalf("inject: %v; logs:\n%s", err, r.logs())
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// intakeLeft is the number of messages the shared intake still holds (stored, not acked).
func (r *clusterRig) intakeLeft() uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nc, err := nats.Connect(r.nats.URL())
	if err != nil {
		r.t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		r.t.Fatal(err)
	}
	s, err := js.Stream(ctx, "GATEWAY_INTAKE")
	if err != nil {
		r.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	return info.State.Msgs
}

// An inject (a turn of its own) posted to one process for a chat another process answers,
// then a SIGKILL of that process while the model answers it: the survivor takes the chat's
// partition and answers the inject, once, and the model's last request holds it once.
func TestClusterInjectSurvivesTheKillOfTheProcessAnsweringIt(t *testing.T) {
	r := newClusterRig(t, "polling")
	victim, chat := r.twoAndAChatOfTheOneNotPolling()
	survivor := r.procs[0]
	if survivor == victim {
		survivor = r.procs[1]
	}
	const text = "injected, then killed"
	var slowOnce atomic.Int64
	slowOnce.Store(1)
	r.slow.Store(text, &slowOnce)
	if status, out := r.inject(survivor, chat, `"text":"`+text+`","trigger":true`); status != http.StatusAccepted {
		t.Fatalf("inject: %d %s; logs:\n%s", status, out, r.logs())
	}
	waitFor(t, "the process answering the chat asks the model", func() bool { return r.modelAsked(text) == 1 }, r.logs())
	victim.kill()
	r.balance()
	waitFor(t, "the inject answered by the survivor", func() bool { return len(r.telegramAnswers(chat)) > 0 }, r.logs())
	quiet()
	if got := r.telegramAnswers(chat); len(got) != 1 || got[0] != "re: "+text {
		t.Fatalf("answers %q; want exactly one, to the inject; logs:\n%s", got, r.logs())
	}
	if n := r.modelAsked(text); n != 2 {
		t.Errorf("model calls for the inject = %d; want the killed process's and one more", n)
	}
	r.askedOnce(text)
	waitFor(t, "the inject leaves the intake once answered", func() bool { return r.intakeLeft() == 0 }, r.logs())
	survivor.stop()
}

// An inject in cluster mode with nothing going wrong, through the process answering the
// chat and through another, waiting for its delivery: each answered once, and the intake
// is left empty.
func TestClusterInjectAnswersOnce(t *testing.T) {
	r := newClusterRig(t, "polling")
	holder, chat := r.twoAndAChatOfTheOneNotPolling()
	other := r.procs[0]
	if other == holder {
		other = r.procs[1]
	}
	for i, p := range []*child{holder, other} {
		text := fmt.Sprintf("plain inject %d", i)
		status, out := r.inject(p, chat, `"text":"`+text+`","trigger":true,"wait":"delivered"`)
		if status != http.StatusOK || !strings.Contains(out, `"delivered"`) {
			t.Fatalf("inject through process %d: %d %s; logs:\n%s", i, status, out, r.logs())
		}
		waitFor(t, "the inject answered", func() bool { return len(r.telegramAnswers(chat)) == i+1 }, r.logs())
		quiet()
		if got := r.telegramAnswers(chat); len(got) != i+1 || got[i] != "re: "+text {
			t.Fatalf("answers %q; want one more, to %q", got, text)
		}
		if n := r.modelAsked(text); n != 1 {
			t.Errorf("model calls for %q = %d; want 1", text, n)
		}
	}
	waitFor(t, "the intake is left empty", func() bool { return r.intakeLeft() == 0 }, r.logs())
	for _, p := range r.procs {
		p.stop()
	}
}

// next_turn injects kept waiting in every partition one process holds do not keep those
// partitions from moving to a process that joins, and go with them; that process killed,
// each chat's next message, answered by a survivor, carries its inject once.
func TestClusterNextTurnInjectsFollowTheirChatsAcrossAJoinAndAKill(t *testing.T) {
	r := newClusterRig(t, "polling")
	r.start(2)
	r.waitBalanced()
	a := r.procs[0]
	var chats []int64
	for _, h := range a.clusterStatus(t).Held {
		for c := int64(20000); ; c++ {
			if cluster.Partition(fmt.Sprintf("telegram:%d", c), 64) == h.Partition {
				chats = append(chats, c)
				break
			}
		}
	}
	for _, c := range chats {
		if status, out := r.inject(a, c, fmt.Sprintf(`"text":"(note for %d)","deliver_as":"next_turn"`, c)); status != http.StatusAccepted {
			t.Fatalf("inject: %d %s; logs:\n%s", status, out, r.logs())
		}
	}
	r.start(1) // it takes a share of the partitions, some of those with a waiting inject
	r.waitBalanced()
	joined := r.procs[2]
	if len(joined.clusterStatus(t).Held) == 0 {
		t.Fatal("the process that joined holds no partition")
	}
	joined.kill()
	r.balance()
	for _, c := range chats {
		r.tg.Send(telegramtest.Update{ChatID: c, Text: fmt.Sprintf("question %d", c)})
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		done := 0
		for _, c := range chats {
			if len(r.telegramAnswers(c)) > 0 {
				done++
			}
		}
		if done == len(chats) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d chats answered after 2 minutes; logs:\n%s", done, len(chats), r.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	quiet()
	for _, c := range chats {
		want := fmt.Sprintf("(note for %d)\n\nquestion %d", c, c)
		if got := r.telegramAnswers(c); len(got) != 1 || got[0] != "re: "+want {
			t.Errorf("chat %d: answers %q; want one, to its question with its inject before it", c, got)
		}
		r.askedOnce(want)
	}
	waitFor(t, "the intake is left empty", func() bool { return r.intakeLeft() == 0 }, r.logs())
	for _, p := range r.procs[:2] {
		p.stop()
	}
}
